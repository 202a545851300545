// One project-owned Kafka KRaft node (combined controller and broker) in this JVM, for tests.
// usage: java -cp 'lib/*:classes' KafkaLauncher WORK_DIR BROKER_PORT CONTROLLER_PORT [kept|fresh [ADVERTISED_PORT]]
//        java -cp 'lib/*:classes' KafkaLauncher WORK_DIR --from-environment
// The first form (the local broker): formats a fresh log dir under WORK_DIR (through StorageTool,
// in a child JVM with this class path), starts the node on 127.0.0.1 only, prints
// "kafka ready 127.0.0.1:PORT" on stdout, and stops when its stdin closes (or on SIGTERM), then
// deletes WORK_DIR; with `kept`, WORK_DIR is formatted only the first time and kept when the node
// stops, so a test can stop the node and start it again on its log; with ADVERTISED_PORT, the node
// tells clients to reach it on 127.0.0.1:ADVERTISED_PORT (a test's fault proxy in front of it).
// The broker's log goes to stderr. Tuned for tests: one partition, replication
// 1, no initial rebalance delay, short group session bounds, so consumer groups join in well
// under a second.
// The second form (the stand-in image's /etc/kafka/docker/run): the node's configuration is the
// environment, read as the apache/kafka image reads it (CLUSTER_ID, and every KAFKA_* variable
// but the JVM's as a property: KAFKA_ dropped, lower case, "___" a dash, "__" an underscore, "_"
// a dot), log.dirs under WORK_DIR unless given; Kafka's own "Kafka Server started" line goes to
// stdout, as in that image, and the node runs until SIGTERM (a container's stdin is closed).
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.stream.Stream;

import kafka.server.KafkaConfig;
import kafka.server.KafkaRaftServer;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.utils.Time;

public class KafkaLauncher {
    public static void main(String[] args) throws Exception {
        boolean fromEnvironment = args.length == 2 && args[1].equals("--from-environment");
        boolean kept = args.length >= 4 && args[3].equals("kept");
        boolean keptOrFresh = args.length >= 4 && (kept || args[3].equals("fresh"));
        if (!fromEnvironment && args.length != 3 && !(keptOrFresh && args.length <= 5)) {
            System.err.println("usage: KafkaLauncher WORK_DIR BROKER_PORT CONTROLLER_PORT [kept|fresh [ADVERTISED_PORT]] | KafkaLauncher WORK_DIR --from-environment");
            System.exit(2);
        }
        // The broker's warnings and errors to stderr (KafkaLogging: one per Kafka version's logging).
        KafkaLogging.toStderr();
        Path work = Path.of(args[0]);
        boolean formatted = Files.exists(work.resolve("data").resolve("meta.properties"));
        if (!kept) {
            deleteTree(work);
            formatted = false;
        }
        Files.createDirectories(work.resolve("data"));
        Properties props = fromEnvironment ? fromEnvironment(work)
            : loopback(work, args[1], args[2], args.length == 5 ? args[4] : args[1]);
        String clusterId = fromEnvironment ? System.getenv("CLUSTER_ID") : Uuid.randomUuid().toString();
        if (clusterId == null || clusterId.isEmpty()) {
            System.err.println("kafka launcher: CLUSTER_ID is unset; the node's configuration comes from the environment, as in the apache/kafka image");
            System.exit(2);
        }
        if (fromEnvironment) {
            KafkaLogging.startedLineToStdout();
        }
        Path config = work.resolve("server.properties");
        try (FileOutputStream out = new FileOutputStream(config.toFile())) {
            props.store(out, "conformance KRaft node");
        }
        if (!formatted) {
            format(config, clusterId);
        }
        KafkaRaftServer server = new KafkaRaftServer(KafkaConfig.fromProps(props, false), Time.SYSTEM);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> stop(server, kept ? null : work)));
        server.startup();
        if (fromEnvironment) {
            // SIGTERM (the engine's stop) runs the shutdown hook, which stops the node.
            server.awaitShutdown();
            return;
        }
        System.out.println("kafka ready 127.0.0.1:" + args[1]);
        System.out.flush();
        // The lifeline: the test binary holds our stdin; it closes when the binary ends.
        InputStream in = System.in;
        byte[] buffer = new byte[256];
        while (in.read(buffer) >= 0) { }
        System.exit(0); // the shutdown hook stops the node (and deletes the folder unless kept)
    }

    /** The local node: loopback only, on the ports the test binary picked, tuned for tests. */
    private static Properties loopback(Path work, String port, String controller, String advertised) {
        Properties props = new Properties();
        props.setProperty("process.roles", "broker,controller");
        props.setProperty("node.id", "1");
        props.setProperty("controller.quorum.voters", "1@127.0.0.1:" + controller);
        props.setProperty("listeners", "PLAINTEXT://127.0.0.1:" + port + ",CONTROLLER://127.0.0.1:" + controller);
        props.setProperty("advertised.listeners", "PLAINTEXT://127.0.0.1:" + advertised);
        props.setProperty("controller.listener.names", "CONTROLLER");
        props.setProperty("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT");
        props.setProperty("inter.broker.listener.name", "PLAINTEXT");
        props.setProperty("log.dirs", work.resolve("data").toString());
        props.setProperty("num.partitions", "1");
        props.setProperty("offsets.topic.replication.factor", "1");
        props.setProperty("offsets.topic.num.partitions", "1");
        props.setProperty("transaction.state.log.replication.factor", "1");
        props.setProperty("transaction.state.log.min.isr", "1");
        // Cells join a new group each: no waiting for more members, short sessions.
        props.setProperty("group.initial.rebalance.delay.ms", "0");
        props.setProperty("group.min.session.timeout.ms", "1000");
        // Topics are created explicitly (the gateway's make-channels); none appears by a typo.
        props.setProperty("auto.create.topics.enable", "false");
        props.setProperty("log.flush.interval.messages", "9223372036854775807");
        return props;
    }

    /** The JVM's variables, which the apache/kafka image does not turn into properties either. */
    private static final Set<String> NOT_PROPERTIES = Set.of("KAFKA_VERSION", "KAFKA_HEAP_OPTS", "KAFKA_LOG4J_OPTS",
        "KAFKA_OPTS", "KAFKA_JMX_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_LOG4J_ROOT_LOGLEVEL",
        "KAFKA_LOG4J_LOGGERS", "KAFKA_TOOLS_LOG4J_LOGLEVEL", "KAFKA_JMX_HOSTNAME");

    /** The container's node: every KAFKA_* variable as a property, as the apache/kafka image reads them. */
    private static Properties fromEnvironment(Path work) {
        Properties props = new Properties();
        props.setProperty("log.dirs", work.resolve("data").toString());
        for (Map.Entry<String, String> variable : System.getenv().entrySet()) {
            String name = variable.getKey();
            if (!name.startsWith("KAFKA_") || NOT_PROPERTIES.contains(name)) {
                continue;
            }
            String key = name.substring("KAFKA_".length()).toLowerCase(Locale.ROOT)
                // A variable's name holds no '-' or '~': each stands in for its run of underscores.
                .replace("___", "-").replace("__", "~").replace('_', '.').replace('~', '_');
            props.setProperty(key, variable.getValue());
        }
        // In KRaft, node.id is broker.id's synonym: a configuration naming only one names both.
        if (!props.containsKey("node.id") && props.containsKey("broker.id")) {
            props.setProperty("node.id", props.getProperty("broker.id"));
        }
        return props;
    }

    /** Stops the node, then deletes `work` unless it is null (a kept node's). */
    private static synchronized void stop(KafkaRaftServer server, Path work) {
        try {
            server.shutdown();
            server.awaitShutdown();
        } catch (Throwable t) {
            System.err.println("kafka launcher: stopping the node failed: " + t);
        }
        try {
            if (work != null) {
                deleteTree(work);
            }
        } catch (IOException e) {
            System.err.println("kafka launcher: cannot delete " + work + ": " + e);
        }
    }

    /** StorageTool exits its JVM when done, so it runs in a child JVM on this class path. */
    private static void format(Path config, String clusterId) throws Exception {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Process format = new ProcessBuilder(java, "-Xmx128m", "-cp", System.getProperty("java.class.path"),
                "kafka.tools.StorageTool", "format", "-t", clusterId, "-c", config.toString())
            // Appended, not truncated: our stderr may be a file the test binary also writes.
            .redirectOutput(ProcessBuilder.Redirect.appendTo(new File("/dev/stderr")))
            .redirectErrorStream(true)
            .start();
        if (format.waitFor() != 0) {
            throw new IllegalStateException("kafka-storage format failed (exit " + format.exitValue() + ")");
        }
    }

    private static void deleteTree(Path path) throws IOException {
        if (!Files.exists(path)) {
            return;
        }
        try (Stream<Path> paths = Files.walk(path)) {
            for (Path p : (Iterable<Path>) paths.sorted(Comparator.reverseOrder())::iterator) {
                Files.deleteIfExists(p);
            }
        }
    }
}
