// The local ElasticMQ server of the conformance harness: ElasticMQ's own entry point, started in
// this JVM, then a ready line the test binary waits for.
//
// Usage: java -Dconfig.file=elasticmq.conf -Drest-sqs.bind-port=P -Dnode-address.port=P \
//            -cp "lib/*:classes" ElasticMqLauncher
// ElasticMQ's Main returns once the server is bound (its actor threads keep the JVM alive), and
// logs its banner through logback with a timestamp first; the harness waits for a line that
// starts with `elasticmq ready`, so this prints one. It stops when stdin closes, so the server
// never outlives the test binary that started it.

public class ElasticMqLauncher {
    public static void main(String[] args) throws Exception {
        String port = System.getProperty("rest-sqs.bind-port");
        if (port == null) {
            System.err.println("ElasticMqLauncher: -Drest-sqs.bind-port=<port> is required");
            System.exit(2);
        }
        org.elasticmq.server.Main.main(new String[0]);
        System.out.println("elasticmq ready on 127.0.0.1:" + port);
        System.out.flush();
        // Until the test binary ends (its end closes our stdin).
        while (System.in.read() != -1) {
        }
        System.exit(0);
    }
}
