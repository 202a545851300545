// The launcher's logging, for Kafka 3.9, which logs through reload4j (log4j 1's API). Kafka 4
// logs through log4j 2: its own KafkaLogging sits beside its pom (4.4.0/).
import org.apache.log4j.ConsoleAppender;
import org.apache.log4j.Level;
import org.apache.log4j.Logger;
import org.apache.log4j.PatternLayout;

final class KafkaLogging {
    private KafkaLogging() { }

    /** The broker's warnings and errors to stderr. */
    static void toStderr() {
        Logger root = Logger.getRootLogger();
        root.addAppender(new ConsoleAppender(new PatternLayout("[kafka] %p %c{1}: %m%n"), "System.err"));
        root.setLevel(Level.WARN);
    }

    /** Kafka's own started line (its KafkaRaftServer logger, at INFO) to stdout, as in the apache/kafka image. */
    static void startedLineToStdout() {
        Logger started = Logger.getLogger("kafka.server.KafkaRaftServer");
        started.setLevel(Level.INFO);
        started.setAdditivity(false);
        started.addAppender(new ConsoleAppender(new PatternLayout("[kafka] %p %m (%c)%n"), "System.out"));
    }
}
