package loopguard.anchor;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueBytesStoreSupplier;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The guard's job done the way a Kafka Streams user would do it: read the agent events
 * (JSON values keyed by session id), keep per-session state in a key-value store with a
 * changelog topic, and write an output record for the events that get a verdict, under
 * {@code processing.guarantee=exactly_once_v2} with a 100 ms commit interval.
 *
 * <p>The rule is a stand-in for the guard's engine: a {@code tool_call} whose tool name and
 * arguments occur at least {@code repeat} times among the session's last {@code window}
 * calls gets an output record (on the benchmark's fleet, 3 in 8 gives about as many records
 * as the guard's verdicts). Every event updates its session's state (an event count and the
 * last calls), as every event updates the guard's.
 *
 * <p>Arguments are {@code key=value}: bootstrap, input, output, app-id, state-dir, stats (a
 * file rewritten every 250 ms with the counters), and optionally threads (1, Streams'
 * default), repeat (3), window (8), store ({@code rocksdb} or {@code memory}), commit-ms
 * (100). Prints {@code anchor: state RUNNING} when it runs.
 */
public final class StreamsAnchor {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String STORE = "sessions";
    private static final LongAdder PROCESSED = new LongAdder();
    private static final LongAdder OUTPUTS = new LongAdder();
    private static final LongAdder MALFORMED = new LongAdder();

    private StreamsAnchor() {}

    public static void main(String[] args) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("expected key=value, got " + arg);
            }
            a.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        String bootstrap = need(a, "bootstrap");
        String input = need(a, "input");
        String output = need(a, "output");
        String appId = need(a, "app-id");
        Path stats = Path.of(need(a, "stats"));
        int repeat = Integer.parseInt(a.getOrDefault("repeat", "3"));
        int window = Integer.parseInt(a.getOrDefault("window", "8"));

        createOutputTopic(bootstrap, input, output);

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, a.getOrDefault("commit-ms", "100"));
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, a.getOrDefault("threads", "1"));
        p.put(StreamsConfig.STATE_DIR_CONFIG, need(a, "state-dir"));
        // Everything else (record cache, producer and consumer settings) stays Streams' default.

        KeyValueBytesStoreSupplier supplier = switch (a.getOrDefault("store", "rocksdb")) {
            case "rocksdb" -> Stores.persistentKeyValueStore(STORE);
            case "memory" -> Stores.inMemoryKeyValueStore(STORE);
            default -> throw new IllegalArgumentException("store must be rocksdb or memory");
        };
        Topology topology = new Topology();
        topology.addSource("events", new StringDeserializer(), new ByteArrayDeserializer(), input);
        topology.addProcessor("judge", () -> new Judge(repeat, window), "events");
        // A changelog (logging) is on by default; the record cache as the DSL has it.
        topology.addStateStore(
                Stores.keyValueStoreBuilder(supplier, Serdes.String(), Serdes.ByteArray()).withCachingEnabled(),
                "judge");
        topology.addSink("verdicts", output, new StringSerializer(), new ByteArraySerializer(), "judge");

        KafkaStreams streams = new KafkaStreams(topology, p);
        streams.setStateListener((now, before) -> {
            System.out.println("anchor: state " + now);
            System.out.flush();
        });
        ScheduledExecutorService ticker = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "anchor-stats");
            t.setDaemon(true);
            return t;
        });
        ticker.scheduleAtFixedRate(() -> writeStats(stats, streams), 250, 250, TimeUnit.MILLISECONDS);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            writeStats(stats, streams);
        }, "anchor-shutdown"));
        streams.start();
    }

    private static String need(Map<String, String> a, String key) {
        String v = a.get(key);
        if (v == null || v.isEmpty()) {
            throw new IllegalArgumentException("missing " + key + "=...");
        }
        return v;
    }

    /** The output topic, partitioned like the input, unless it exists. */
    private static void createOutputTopic(String bootstrap, String input, String output) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(p)) {
            int partitions = admin.describeTopics(List.of(input)).allTopicNames().get()
                    .get(input).partitions().size();
            try {
                admin.createTopics(List.of(new NewTopic(output, Optional.of(partitions), Optional.empty())))
                        .all().get();
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) {
                    throw e;
                }
            }
        }
    }

    /** Counters for the benchmark: ours, and Streams' own count of its threads' commits. */
    private static void writeStats(Path stats, KafkaStreams streams) {
        double commits = 0;
        for (Map.Entry<MetricName, ? extends Metric> m : streams.metrics().entrySet()) {
            MetricName n = m.getKey();
            if (n.name().equals("commit-total") && n.group().equals("stream-thread-metrics")
                    && m.getValue().metricValue() instanceof Number v) {
                commits += v.doubleValue();
            }
        }
        String line = "processed=" + PROCESSED.sum() + " outputs=" + OUTPUTS.sum() + " malformed="
                + MALFORMED.sum() + " commits=" + (long) commits + " state=" + streams.state() + "\n";
        try {
            Path tmp = stats.resolveSibling(stats.getFileName() + ".tmp");
            Files.writeString(tmp, line);
            Files.move(tmp, stats, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The stand-in rule, on each session's state. */
    static final class Judge implements Processor<String, byte[], String, byte[]> {
        private final int repeat;
        private final int window;
        private KeyValueStore<String, byte[]> store;
        private ProcessorContext<String, byte[]> context;

        Judge(int repeat, int window) {
            this.repeat = repeat;
            this.window = window;
        }

        @Override
        public void init(ProcessorContext<String, byte[]> context) {
            this.context = context;
            this.store = context.getStateStore(STORE);
        }

        @Override
        public void process(Record<String, byte[]> record) {
            PROCESSED.increment();
            String session = record.key();
            JsonNode event;
            try {
                event = record.value() == null ? null : JSON.readTree(record.value());
            } catch (IOException e) {
                event = null;
            }
            if (session == null || event == null || !event.isObject()) {
                MALFORMED.increment();
                return;
            }
            Session state = Session.decode(store.get(session));
            state.events++;
            if ("tool_call".equals(event.path("type").asText())) {
                String call = event.path("tool").asText() + '\u0000' + event.path("args").toString();
                state.calls.addLast(call);
                while (state.calls.size() > window) {
                    state.calls.removeFirst();
                }
                int seen = 0;
                for (String c : state.calls) {
                    if (c.equals(call)) {
                        seen++;
                    }
                }
                if (seen >= repeat) {
                    ObjectNode out = JSON.createObjectNode();
                    out.put("v", 1);
                    out.put("session_id", session);
                    out.put("event_id", event.path("event_id").asText());
                    out.put("rule", "anchor.tool_repeat");
                    out.put("action", "block");
                    out.put("tool", event.path("tool").asText());
                    out.put("repeats", seen);
                    out.put("window", window);
                    out.put("emitted_at", System.currentTimeMillis());
                    try {
                        context.forward(new Record<>(session, JSON.writeValueAsBytes(out), record.timestamp()));
                    } catch (IOException e) {
                        throw new UncheckedIOException(e);
                    }
                    OUTPUTS.increment();
                }
            }
            store.put(session, state.encode());
        }
    }

    /** A session's state: its event count and its last calls (tool and arguments). */
    static final class Session {
        long events;
        final ArrayDeque<String> calls = new ArrayDeque<>();

        static Session decode(byte[] bytes) {
            Session s = new Session();
            if (bytes == null) {
                return s;
            }
            try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(bytes))) {
                s.events = in.readLong();
                int n = in.readUnsignedByte();
                for (int i = 0; i < n; i++) {
                    s.calls.addLast(in.readUTF());
                }
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            return s;
        }

        byte[] encode() {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream(16 + 64 * calls.size());
            try (DataOutputStream out = new DataOutputStream(bytes)) {
                out.writeLong(events);
                out.writeByte(calls.size());
                for (String c : calls) {
                    out.writeUTF(c.length() > 4096 ? c.substring(0, 4096) : c);
                }
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            return bytes.toByteArray();
        }
    }
}
