// Client quotas through the Java AdminClient (kafka-clients 3.9.1): alterClientQuotas
// (AlterClientQuotas) and describeClientQuotas (DescribeClientQuotas), run by
// tests/broker/test_quotas_wire.py. One JSON object per command on stdout.
//
//   java SemelQuotas BOOTSTRAP alter ENTITY KEY VALUE|remove [validate]
//   java SemelQuotas BOOTSTRAP describe [strict] FILTER...
// ENTITY: comma-separated type=name parts, name "<default>" for the default entity
// (user=alice,client-id=app); FILTER: type=name (exact), type (default) or type=* (any).
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterClientQuotasOptions;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;

public class SemelQuotas {
    static String quote(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static ClientQuotaEntity entity(String spec) {
        Map<String, String> parts = new TreeMap<>();
        for (String part : spec.split(",")) {
            String[] kv = part.split("=", 2);
            parts.put(kv[0], kv[1].equals("<default>") ? null : kv[1]);
        }
        return new ClientQuotaEntity(parts);
    }

    static String entityJson(ClientQuotaEntity entity) {
        StringBuilder out = new StringBuilder("{");
        String sep = "";
        for (Map.Entry<String, String> e : new TreeMap<>(entity.entries()).entrySet()) {
            out.append(sep).append(quote(e.getKey())).append(": ").append(quote(e.getValue()));
            sep = ", ";
        }
        return out.append("}").toString();
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        try (Admin admin = Admin.create(props)) {
            if (args[1].equals("alter")) {
                Double value = args[4].equals("remove") ? null : Double.valueOf(args[4]);
                ClientQuotaAlteration alteration = new ClientQuotaAlteration(entity(args[2]),
                    List.of(new ClientQuotaAlteration.Op(args[3], value)));
                boolean validate = args.length > 5 && args[5].equals("validate");
                try {
                    admin.alterClientQuotas(List.of(alteration),
                        new AlterClientQuotasOptions().validateOnly(validate)).all().get();
                    System.out.println("{\"ok\": true}");
                } catch (ExecutionException e) {
                    System.out.println("{\"ok\": false, \"error\": "
                        + quote(e.getCause().getClass().getSimpleName()) + ", \"message\": "
                        + quote(e.getCause().getMessage()) + "}");
                }
                return;
            }
            boolean strict = args.length > 2 && args[2].equals("strict");
            List<ClientQuotaFilterComponent> components = new ArrayList<>();
            for (int i = strict ? 3 : 2; i < args.length; i++) {
                String[] kv = args[i].split("=", 2);
                components.add(kv.length == 1 ? ClientQuotaFilterComponent.ofDefaultEntity(kv[0])
                    : kv[1].equals("*") ? ClientQuotaFilterComponent.ofEntityType(kv[0])
                    : ClientQuotaFilterComponent.ofEntity(kv[0], kv[1]));
            }
            ClientQuotaFilter filter = strict ? ClientQuotaFilter.containsOnly(components)
                : ClientQuotaFilter.contains(components);
            Map<ClientQuotaEntity, Map<String, Double>> quotas =
                admin.describeClientQuotas(filter).entities().get();
            List<String> rows = new ArrayList<>();
            for (Map.Entry<ClientQuotaEntity, Map<String, Double>> e : quotas.entrySet()) {
                StringBuilder values = new StringBuilder("{");
                String sep = "";
                for (Map.Entry<String, Double> v : new TreeMap<>(e.getValue()).entrySet()) {
                    values.append(sep).append(quote(v.getKey())).append(": ").append(v.getValue());
                    sep = ", ";
                }
                rows.add("{\"entity\": " + entityJson(e.getKey()) + ", \"values\": "
                    + values.append("}") + "}");
            }
            rows.sort(null);
            System.out.println("{\"entries\": [" + String.join(", ", rows) + "]}");
        }
    }
}
