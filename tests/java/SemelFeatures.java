// Feature flags through the Java AdminClient (kafka-clients 3.9.1): describeFeatures (an
// ApiVersions request) and updateFeatures (UpdateFeatures). One JSON object per command on
// stdout; a failed update prints its exception instead of ending the run.
//
//   java SemelFeatures BOOTSTRAP describe
//   java SemelFeatures BOOTSTRAP update FEATURE LEVEL upgrade|safe|unsafe [validate]
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.SupportedVersionRange;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;

public class SemelFeatures {
    static String quote(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        try (Admin admin = Admin.create(props)) {
            if (args[1].equals("describe")) {
                FeatureMetadata md = admin.describeFeatures().featureMetadata().get();
                StringBuilder out = new StringBuilder("{\"epoch\": ");
                out.append(md.finalizedFeaturesEpoch().map(String::valueOf).orElse("null"));
                out.append(", \"finalized\": {");
                String sep = "";
                for (Map.Entry<String, FinalizedVersionRange> e
                        : new TreeMap<>(md.finalizedFeatures()).entrySet()) {
                    out.append(sep).append(quote(e.getKey())).append(": [")
                        .append(e.getValue().minVersionLevel()).append(", ")
                        .append(e.getValue().maxVersionLevel()).append("]");
                    sep = ", ";
                }
                out.append("}, \"supported\": {");
                sep = "";
                for (Map.Entry<String, SupportedVersionRange> e
                        : new TreeMap<>(md.supportedFeatures()).entrySet()) {
                    out.append(sep).append(quote(e.getKey())).append(": [")
                        .append(e.getValue().minVersion()).append(", ")
                        .append(e.getValue().maxVersion()).append("]");
                    sep = ", ";
                }
                System.out.println(out.append("}}"));
                return;
            }
            String feature = args[2];
            short level = Short.parseShort(args[3]);
            FeatureUpdate.UpgradeType type = switch (args[4]) {
                case "upgrade" -> FeatureUpdate.UpgradeType.UPGRADE;
                case "safe" -> FeatureUpdate.UpgradeType.SAFE_DOWNGRADE;
                default -> FeatureUpdate.UpgradeType.UNSAFE_DOWNGRADE;
            };
            UpdateFeaturesOptions options = new UpdateFeaturesOptions()
                .validateOnly(args.length > 5 && args[5].equals("validate"));
            try {
                admin.updateFeatures(Map.of(feature, new FeatureUpdate(level, type)), options)
                    .all().get();
                System.out.println("{\"ok\": true}");
            } catch (ExecutionException e) {
                System.out.println("{\"ok\": false, \"error\": "
                    + quote(e.getCause().getClass().getSimpleName()) + ", \"message\": "
                    + quote(e.getCause().getMessage()) + "}");
            }
        }
    }
}
