// The launcher's logging, for Kafka 4, which logs through log4j 2 (Kafka 3.9's, through reload4j,
// is ../KafkaLogging.java): the same two routes, built as a log4j 2 configuration.
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.core.appender.ConsoleAppender;
import org.apache.logging.log4j.core.config.Configurator;
import org.apache.logging.log4j.core.config.builder.api.ConfigurationBuilder;
import org.apache.logging.log4j.core.config.builder.api.ConfigurationBuilderFactory;
import org.apache.logging.log4j.core.config.builder.impl.BuiltConfiguration;

final class KafkaLogging {
    private KafkaLogging() { }

    private static final ConfigurationBuilder<BuiltConfiguration> CONFIGURATION =
        ConfigurationBuilderFactory.newConfigurationBuilder();

    /** The broker's warnings and errors to stderr. */
    static synchronized void toStderr() {
        CONFIGURATION.add(console("stderr", ConsoleAppender.Target.SYSTEM_ERR, "[kafka] %p %c{1}: %m%n"));
        CONFIGURATION.add(CONFIGURATION.newRootLogger(Level.WARN).add(CONFIGURATION.newAppenderRef("stderr")));
        Configurator.reconfigure(CONFIGURATION.build());
    }

    /** Kafka's own started line (its KafkaRaftServer logger, at INFO) to stdout, as in the apache/kafka image. */
    static synchronized void startedLineToStdout() {
        CONFIGURATION.add(console("stdout", ConsoleAppender.Target.SYSTEM_OUT, "[kafka] %p %m (%c)%n"));
        CONFIGURATION.add(CONFIGURATION.newLogger("kafka.server.KafkaRaftServer", Level.INFO)
            .add(CONFIGURATION.newAppenderRef("stdout"))
            .addAttribute("additivity", false));
        Configurator.reconfigure(CONFIGURATION.build());
    }

    private static org.apache.logging.log4j.core.config.builder.api.AppenderComponentBuilder console(
            String name, ConsoleAppender.Target target, String pattern) {
        return CONFIGURATION.newAppender(name, "Console")
            .addAttribute("target", target)
            .add(CONFIGURATION.newLayout("PatternLayout").addAttribute("pattern", pattern));
    }
}
