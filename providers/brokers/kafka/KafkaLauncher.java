// One project-owned Kafka KRaft node (combined controller and broker) in this JVM, for tests.
// usage: java -cp 'lib/*:classes' KafkaLauncher WORK_DIR BROKER_PORT CONTROLLER_PORT
// Formats a fresh log dir under WORK_DIR (through StorageTool, in a child JVM with this class
// path), starts the node on 127.0.0.1 only, prints "kafka ready 127.0.0.1:PORT" on stdout, and
// stops when its stdin closes (or on SIGTERM), then deletes WORK_DIR. The broker's log goes to
// stderr. Tuned for tests: one partition, replication 1, no initial rebalance delay, short
// group session bounds, so consumer groups join in well under a second.
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.Properties;
import java.util.stream.Stream;

import kafka.server.KafkaConfig;
import kafka.server.KafkaRaftServer;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.utils.Time;

public class KafkaLauncher {
    public static void main(String[] args) throws Exception {
        // The broker's warnings and errors to stderr (Kafka 3.9 logs through reload4j).
        org.apache.log4j.Logger root = org.apache.log4j.Logger.getRootLogger();
        root.addAppender(new org.apache.log4j.ConsoleAppender(
            new org.apache.log4j.PatternLayout("[kafka] %p %c{1}: %m%n"), "System.err"));
        root.setLevel(org.apache.log4j.Level.WARN);
        Path work = Path.of(args[0]);
        String port = args[1], controller = args[2];
        deleteTree(work);
        Files.createDirectories(work.resolve("data"));
        Properties props = loopback(work, port, controller);
        Path config = work.resolve("server.properties");
        try (FileOutputStream out = new FileOutputStream(config.toFile())) {
            props.store(out, "conformance KRaft node");
        }
        format(config, Uuid.randomUuid().toString());
        KafkaRaftServer server = new KafkaRaftServer(KafkaConfig.fromProps(props, false), Time.SYSTEM);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> stop(server, work)));
        server.startup();
        System.out.println("kafka ready 127.0.0.1:" + port);
        System.out.flush();
        // The lifeline: the test binary holds our stdin; it closes when the binary ends.
        InputStream in = System.in;
        byte[] buffer = new byte[256];
        while (in.read(buffer) >= 0) { }
        System.exit(0); // the shutdown hook stops the node and deletes the folder
    }

    /** The local node: loopback only, on the ports the test binary picked, tuned for tests. */
    private static Properties loopback(Path work, String port, String controller) {
        Properties props = new Properties();
        props.setProperty("process.roles", "broker,controller");
        props.setProperty("node.id", "1");
        props.setProperty("controller.quorum.voters", "1@127.0.0.1:" + controller);
        props.setProperty("listeners", "PLAINTEXT://127.0.0.1:" + port + ",CONTROLLER://127.0.0.1:" + controller);
        props.setProperty("advertised.listeners", "PLAINTEXT://127.0.0.1:" + port);
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

    private static synchronized void stop(KafkaRaftServer server, Path work) {
        try {
            server.shutdown();
            server.awaitShutdown();
        } catch (Throwable t) {
            System.err.println("kafka launcher: stopping the node failed: " + t);
        }
        try {
            deleteTree(work);
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
