// The local RocketMQ broker of the conformance harness: a name server and one broker in a single
// JVM (one heap, one start-up), on loopback ports given by the caller.
//
// Usage: java -cp "lib/*:classes" Launcher <work dir> <name server port> <broker port> [kept [advertised ip]]
// Prints `rocketmq ready ...` on stdout once both serve, then stops when stdin closes, deleting
// its store (after copying the errors of its pop and store logs to stderr), so the broker never
// outlives the test binary that started it. With `kept`, it shuts the broker down in order and
// keeps the work dir, so a test can start it again on its store; with an advertised ip (another
// loopback address, 127.0.0.2), the broker registers that address with the name server, so
// clients reach it through a test's fault proxy listening there on the broker's port. Topics are created by the clients (the transport's
// make-channels), through the broker's TBW102 template topic.

import java.io.FileWriter;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.List;
import java.util.Properties;

import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.broker.BrokerStartup;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.namesrv.NamesrvStartup;

public class Launcher {
    public static void main(String[] args) throws Exception {
        boolean kept = args.length >= 4 && args[3].equals("kept");
        if (args.length != 3 && !(kept && args.length <= 5)) {
            System.err.println("usage: Launcher <work dir> <name server port> <broker port> [kept [advertised ip]]");
            System.exit(2);
        }
        Path work = Path.of(args[0]).toAbsolutePath();
        int namesrvPort = Integer.parseInt(args[1]);
        int brokerPort = Integer.parseInt(args[2]);
        String namesrv = "127.0.0.1:" + namesrvPort;
        String broker = "127.0.0.1:" + brokerPort;
        Files.createDirectories(work);
        System.setProperty("rocketmq.home.dir", work.toString());

        Properties namesrvConf = new Properties();
        namesrvConf.setProperty("listenPort", String.valueOf(namesrvPort));
        namesrvConf.setProperty("bindAddress", "127.0.0.1");
        NamesrvController namesrvController =
            NamesrvStartup.main0(new String[] {"-c", write(work.resolve("namesrv.conf"), namesrvConf)});

        Properties brokerConf = new Properties();
        brokerConf.setProperty("brokerClusterName", "ConformanceCluster");
        brokerConf.setProperty("brokerName", "conformance-broker");
        brokerConf.setProperty("brokerId", "0");
        brokerConf.setProperty("brokerIP1", args.length == 5 ? args[4] : "127.0.0.1");
        brokerConf.setProperty("namesrvAddr", namesrv);
        brokerConf.setProperty("listenPort", String.valueOf(brokerPort));
        brokerConf.setProperty("bindAddress", "127.0.0.1");
        // The HA port defaults to listenPort + 1 on every interface; nothing here replicates.
        brokerConf.setProperty("haListenPort", String.valueOf(brokerPort + 1));
        brokerConf.setProperty("storePathRootDir", work.resolve("store").toString());
        brokerConf.setProperty("storePathCommitLog", work.resolve("store/commitlog").toString());
        // Small files: a conformance run writes kilobytes, and the defaults map 1 GiB up front.
        brokerConf.setProperty("mappedFileSizeCommitLog", String.valueOf(64 * 1024 * 1024));
        brokerConf.setProperty("mappedFileSizeConsumeQueue", String.valueOf(600_000));
        brokerConf.setProperty("flushDiskType", "ASYNC_FLUSH");
        // Every thread that stores a message keeps its own direct encoding buffer of
        // maxMessageSize + 64 KiB (4.06 MiB by default) for life. With the default pools (20 pop,
        // 16 ack, 8 revive, 18 schedule, 2 send, a few timer threads) that outgrows the JVM's
        // direct memory, and a pop that cannot get its buffer is never answered (seen here as
        // client time-outs, "Cannot reserve 4259840 bytes of direct buffer memory" in pop.log).
        // A test binary's broker needs few pop and ack threads: at most 44 storing threads remain
        // (179 MiB; 154 MiB measured after six matrix runs on one broker), inside the
        // -XX:MaxDirectMemorySize the provider gives the JVM.
        brokerConf.setProperty("pullMessageThreadPoolNums", "4");
        brokerConf.setProperty("ackMessageThreadPoolNums", "4");
        // Registers the TBW102 template topic, through which clients create topics.
        brokerConf.setProperty("autoCreateTopicEnable", "true");
        brokerConf.setProperty("autoCreateSubscriptionGroup", "true");
        BrokerController controller = BrokerStartup.createBrokerController(
            new String[] {"-c", write(work.resolve("broker.conf"), brokerConf), "-n", namesrv});
        BrokerStartup.start(controller);
        // `ready` must mean clients find the TBW102 template topic's route. The broker registers
        // with the name server in the background, and a failed first registration is retried
        // only 30 s later (seen in about a third of the starts here): register until it shows.
        for (int attempt = 0; namesrvController.getRouteInfoManager().pickupTopicRouteData("TBW102") == null; attempt++) {
            if (attempt == 300) {
                System.err.println("the broker did not register with the name server within 30 s");
                System.exit(1);
            }
            controller.registerBrokerAll(true, false, true);
            Thread.sleep(100);
        }

        System.out.println("rocketmq ready namesrv=" + namesrv + " broker=" + broker);
        System.out.flush();

        while (System.in.read() != -1) {
            // Input is ignored: only its end matters.
        }
        if (kept) {
            // Kept for a restart: the broker persists its consumer offsets and pop checkpoints
            // as it shuts down.
            controller.shutdown();
            namesrvController.shutdown();
            Runtime.getRuntime().halt(0);
        }
        // No orderly shutdown: the store is deleted anyway, and the broker's own shutdown takes
        // 10-40 s, during which the test binary's inherited stderr stays open and its run with it.
        // The halt comes whatever happens before it: the broker's threads would keep the JVM up.
        try {
            reportErrors(Path.of(System.getProperty("user.home"), "logs", "rocketmqlogs"));
            deleteRecursively(work);
        } catch (IOException | RuntimeException e) {
            System.err.println("rocketmq launcher: cleaning up " + work + " failed: " + e);
        } finally {
            Runtime.getRuntime().halt(0);
        }
    }

    // The logs go with the run folder, and a failing cell's cause with them (a pop the broker
    // never answered showed only in pop.log). The pop and store logs are quiet in a healthy run,
    // so their errors are copied to stderr, where the test binary's output shows them.
    private static void reportErrors(Path logs) throws IOException {
        for (String name : List.of("pop.log", "store.log")) {
            Path log = logs.resolve(name);
            if (!Files.exists(log)) {
                continue;
            }
            List<String> lines = Files.readAllLines(log);
            int errors = 0;
            for (int i = 0; i < lines.size(); i++) {
                if (!lines.get(i).contains(" ERROR ") || ++errors > 3) {
                    continue;
                }
                System.err.println("rocketmq broker " + name + ": " + lines.get(i));
                // The exception, when there is one, heads the next line (its stack frames follow).
                if (i + 1 < lines.size() && !lines.get(i + 1).matches("^\\d{4}-.*")) {
                    System.err.println("rocketmq broker " + name + ":   " + lines.get(i + 1));
                }
            }
            if (errors > 3) {
                System.err.println("rocketmq broker " + name + ": ... " + (errors - 3) + " more errors");
            }
        }
    }

    // The store belongs to one test binary's run: nothing in it is wanted afterwards.
    private static void deleteRecursively(Path folder) throws IOException {
        try (var paths = Files.walk(folder)) {
            paths.sorted(Comparator.reverseOrder()).forEach(path -> path.toFile().delete());
        }
    }

    private static String write(Path file, Properties properties) throws IOException {
        try (FileWriter writer = new FileWriter(file.toFile())) {
            properties.store(writer, "written by the conformance launcher");
        }
        return file.toString();
    }
}
