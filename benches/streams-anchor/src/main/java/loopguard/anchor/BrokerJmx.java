package loopguard.anchor;

import com.sun.tools.attach.VirtualMachine;
import java.util.Map;
import java.util.TreeMap;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

/**
 * One reading of a local broker's request and byte counters, for scripts/streams-bench.sh:
 * attaches to the broker's JVM by pid (its local management agent: no port, no change to
 * how the broker was started) and prints {@code name count} lines, counts since the
 * broker's start, which the script subtracts across a measured window:
 * <ul>
 *   <li>{@code req.API}: requests handled, by API (Produce, Fetch, EndTxn, ...), all
 *       versions summed;</li>
 *   <li>{@code bytes_in.TOPIC}, {@code msgs_in.TOPIC}: bytes and records appended to each
 *       topic by produce requests.</li>
 * </ul>
 * Usage: {@code java -cp ... loopguard.anchor.BrokerJmx PID}.
 */
public final class BrokerJmx {
    private BrokerJmx() {}

    public static void main(String[] args) throws Exception {
        VirtualMachine vm = VirtualMachine.attach(args[0]);
        String address;
        try {
            address = vm.startLocalManagementAgent();
        } finally {
            vm.detach();
        }
        Map<String, Long> counts = new TreeMap<>();
        try (JMXConnector c = JMXConnectorFactory.connect(new JMXServiceURL(address))) {
            MBeanServerConnection m = c.getMBeanServerConnection();
            for (ObjectName n : m.queryNames(
                    new ObjectName("kafka.network:type=RequestMetrics,name=RequestsPerSec,*"), null)) {
                counts.merge("req." + n.getKeyProperty("request"), count(m, n), Long::sum);
            }
            for (String metric : new String[] {"BytesInPerSec", "MessagesInPerSec"}) {
                String prefix = metric.startsWith("Bytes") ? "bytes_in." : "msgs_in.";
                for (ObjectName n : m.queryNames(
                        new ObjectName("kafka.server:type=BrokerTopicMetrics,name=" + metric + ",*"), null)) {
                    String topic = n.getKeyProperty("topic");
                    if (topic != null) {
                        counts.merge(prefix + topic, count(m, n), Long::sum);
                    }
                }
            }
        }
        StringBuilder out = new StringBuilder();
        counts.forEach((k, v) -> out.append(k).append(' ').append(v).append('\n'));
        System.out.print(out);
    }

    private static long count(MBeanServerConnection m, ObjectName n) throws Exception {
        return ((Number) m.getAttribute(n, "Count")).longValue();
    }
}
