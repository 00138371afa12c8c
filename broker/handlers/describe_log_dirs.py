"""DescribeLogDirs (key 35), v1-4.

One log dir (``log.dirs``, as an absolute path) holding every partition. ``topics`` null asks
for every partition; otherwise only the named partitions that exist are listed and topics with
none are left out (Kafka does the same). Per partition: its size in bytes, offset lag 0 (no
future replica, nothing to catch up) and is_future false. v3: top-level error code. v4:
total and usable bytes of the directory's file system (``shutil.disk_usage``; usable is what
an unprivileged writer may use). A file-system error answers KAFKA_STORAGE_ERROR for the dir.
"""

from __future__ import annotations

import os
import shutil

from semel.broker.handlers._authz import cluster_allows
from semel.broker.security import AclOperation
from semel.protocol.errors import Error
from semel.protocol.messages.describe_log_dirs_request import DescribeLogDirsRequest
from semel.protocol.messages.describe_log_dirs_response import (
    DescribeLogDirsPartition,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
    DescribeLogDirsTopic,
)

API_KEY = 35


def _wanted(req: DescribeLogDirsRequest) -> set[tuple[str, int]] | None:
    if req.topics is None:
        return None
    return {(t.topic, p) for t in req.topics for p in t.partitions}


async def handle(ctx, req: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not cluster_allows(ctx, AclOperation.DESCRIBE):
        return DescribeLogDirsResponse(error_code=Error.CLUSTER_AUTHORIZATION_FAILED, results=[])
    logs = ctx.log_manager
    log_dir = os.path.abspath(logs.data_dir)
    wanted = _wanted(req)
    by_topic: dict[str, list[DescribeLogDirsPartition]] = {}
    for tp, plog in sorted(logs.logs.items()):
        if wanted is not None and (tp.topic, tp.partition) not in wanted:
            continue
        by_topic.setdefault(tp.topic, []).append(DescribeLogDirsPartition(
            partition_index=tp.partition, partition_size=plog.size_in_bytes, offset_lag=0,
            is_future_key=False))
    try:
        usage = shutil.disk_usage(log_dir)
    except OSError:
        result = DescribeLogDirsResult(error_code=Error.KAFKA_STORAGE_ERROR, log_dir=log_dir)
        return DescribeLogDirsResponse(error_code=Error.NONE, results=[result])
    result = DescribeLogDirsResult(
        error_code=Error.NONE, log_dir=log_dir,
        topics=[DescribeLogDirsTopic(name, parts) for name, parts in by_topic.items()],
        total_bytes=usage.total, usable_bytes=usage.free)
    return DescribeLogDirsResponse(error_code=Error.NONE, results=[result])


def error_response(req: DescribeLogDirsRequest, code: Error) -> DescribeLogDirsResponse:
    return DescribeLogDirsResponse(error_code=code, results=[])
