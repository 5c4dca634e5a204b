package raftlock.interop;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.FileOutputStream;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A logging TCP proxy for diagnosis (the {@code --trace FILE} flag): the library
 * connects to it instead of the server, every byte is passed on unchanged as soon as
 * it arrives, and a copy of each direction is parsed as RESP (RESP3 types included)
 * and written to FILE, one line per command ({@code #conn >}) and per reply or push
 * ({@code #conn <}), with the milliseconds since the proxy started.
 *
 * <p>It also remembers the last error reply and the command it answered (replies on a
 * connection answer its commands in order; RESP3 pushes and RESP2 pub/sub messages do
 * not count), so a failing case can name the command the server refused.
 */
final class TraceProxy implements AutoCloseable {

    private final ServerSocket listener;
    private final int target;
    private final PrintStream log;
    private final long t0 = System.nanoTime();
    private final AtomicInteger ids = new AtomicInteger();
    private volatile String lastError;

    TraceProxy(int target, String file) throws IOException {
        this.target = target;
        this.log = new PrintStream(new FileOutputStream(file, true), true, StandardCharsets.UTF_8);
        this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread t = new Thread(this::accept, "trace-accept");
        t.setDaemon(true);
        t.start();
    }

    int port() {
        return listener.getLocalPort();
    }

    /** "command -> error" for the last error reply seen (NOSCRIPT aside), or null. */
    String lastError() {
        return lastError;
    }

    void clearLastError() {
        lastError = null;
    }

    void note(String text) {
        line("--", text);
    }

    @Override
    public void close() {
        try {
            listener.close();
        } catch (IOException ignored) {
            // the run is over
        }
    }

    private synchronized void line(String who, String text) {
        log.printf("%8.3f %s %s%n", (System.nanoTime() - t0) / 1e9, who, text);
    }

    private void accept() {
        while (!listener.isClosed()) {
            try {
                Socket client = listener.accept();
                Socket server = new Socket();
                server.connect(new InetSocketAddress("127.0.0.1", target), 5000);
                client.setTcpNoDelay(true);
                server.setTcpNoDelay(true);
                new Conn(ids.incrementAndGet(), client, server).start();
            } catch (IOException e) {
                if (!listener.isClosed()) {
                    line("--", "accept: " + e);
                }
            }
        }
    }

    /** One proxied connection: a thread for each direction. */
    private final class Conn {
        final int id;
        final Socket client;
        final Socket server;
        /** The commands seen, in order; the n-th reply (pushes aside) answers the n-th. */
        final List<String> commands = new ArrayList<>();
        int answered;

        Conn(int id, Socket client, Socket server) {
            this.id = id;
            this.client = client;
            this.server = server;
        }

        void start() throws IOException {
            pump("#" + id + " >", client.getInputStream(), server.getOutputStream(), true);
            pump("#" + id + " <", server.getInputStream(), client.getOutputStream(), false);
        }

        /**
         * The command the next reply answers. The command is passed on before it is
         * parsed, so its reply may be read first: wait for it a little.
         */
        String answer() throws InterruptedException {
            synchronized (commands) {
                long deadline = System.nanoTime() + 1_000_000_000L;
                while (commands.size() <= answered && System.nanoTime() < deadline) {
                    commands.wait(100);
                }
                String c = commands.size() > answered ? commands.get(answered) : "(unknown command)";
                answered++;
                if (answered > 1000 && answered <= commands.size()) {
                    commands.subList(0, answered).clear();
                    answered = 0;
                }
                return c;
            }
        }

        void pump(String who, InputStream from, OutputStream to, boolean commands) {
            Thread t = new Thread(() -> {
                Resp in = new Resp(new BufferedInputStream(new Tee(from, to), 65536));
                try {
                    while (true) {
                        boolean[] push = {false};
                        String v = in.value(push);
                        line(who, v);
                        if (commands) {
                            synchronized (this.commands) {
                                this.commands.add(v);
                                this.commands.notifyAll();
                            }
                        } else if (!push[0]) {
                            String cmd = answer();
                            // NOSCRIPT is Redisson's ordinary path: EVALSHA, then EVAL
                            if ((v.startsWith("-") || v.startsWith("!")) && !v.startsWith("-NOSCRIPT")) {
                                lastError = cmd + " -> " + v;
                            }
                        }
                    }
                } catch (IOException | RuntimeException | InterruptedException e) {
                    if (!(e instanceof EOFException)) {
                        line(who, "(stream ended: " + e + ")");
                    }
                } finally {
                    try {
                        client.close();
                        server.close();
                    } catch (IOException ignored) {
                        // both sides go together
                    }
                }
            }, "trace-" + who);
            t.setDaemon(true);
            t.start();
        }
    }

    /** Passes on each chunk read from the socket before the parser sees it. */
    private static final class Tee extends FilterInputStream {
        private final OutputStream to;

        Tee(InputStream from, OutputStream to) {
            super(from);
            this.to = to;
        }

        @Override
        public int read() throws IOException {
            byte[] b = new byte[1];
            return read(b, 0, 1) < 0 ? -1 : b[0] & 0xff;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            int n = super.read(b, off, len);
            if (n > 0) {
                to.write(b, off, n);
                to.flush();
            }
            return n;
        }
    }

    /** A RESP2/RESP3 reader that renders each value as one line of text. */
    private static final class Resp {
        private final InputStream in;

        Resp(InputStream in) {
            this.in = in;
        }

        private String line() throws IOException {
            ByteArrayOutputStream b = new ByteArrayOutputStream();
            while (true) {
                int c = in.read();
                if (c < 0) {
                    throw new EOFException();
                }
                if (c == '\n') {
                    byte[] l = b.toByteArray();
                    int n = l.length > 0 && l[l.length - 1] == '\r' ? l.length - 1 : l.length;
                    return new String(l, 0, n, StandardCharsets.UTF_8);
                }
                b.write(c);
            }
        }

        /** The next value; push[0] is set if it is a RESP3 push or a RESP2 pub/sub message. */
        String value(boolean[] push) throws IOException {
            String l = line();
            if (l.isEmpty()) {
                return "(empty line)";
            }
            char t = l.charAt(0);
            String rest = l.substring(1);
            switch (t) {
                case '+', '-', ':', ',', '(', '#':
                    return l;
                case '_':
                    return "(null)";
                case '$', '=', '!': {
                    int n = Integer.parseInt(rest);
                    if (n < 0) {
                        return "(nil)";
                    }
                    byte[] b = in.readNBytes(n + 2);
                    String s = Plain.show(new String(b, 0, Math.min(n, b.length), StandardCharsets.UTF_8));
                    return t == '$' ? s : t + s;
                }
                case '*', '~', '>', '%', '|': {
                    int n = Integer.parseInt(rest);
                    if (n < 0) {
                        return "(nil array)";
                    }
                    int items = t == '%' || t == '|' ? 2 * n : n;
                    StringBuilder s = new StringBuilder(t == '*' ? "[" : t + "[");
                    for (int i = 0; i < items; i++) {
                        if (i > 0) {
                            s.append(i % 2 == 1 && (t == '%' || t == '|') ? ": " : " ");
                        }
                        s.append(value(new boolean[1]));
                    }
                    s.append(']');
                    String v = s.toString();
                    if (t == '>') {
                        push[0] = true;
                    } else if (t == '*' && (v.startsWith("[\"message\" ") || v.startsWith("[\"pmessage\" ")
                            || v.startsWith("[\"smessage\" "))) {
                        push[0] = true;
                    }
                    if (t == '|') {
                        // an attribute precedes the value it describes
                        return v + " " + value(push);
                    }
                    return v;
                }
                default:
                    return "(unparsed) " + l;
            }
        }
    }
}
