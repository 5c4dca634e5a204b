package raftlock.interop;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * A minimal RESP2 client on a raw socket, deliberately independent of Jedis and
 * Lettuce: a case passes only if the library reports success AND what Plain reads
 * from the server afterwards (GET, PTTL, EXISTS, LOCK.INFO, SCRIPT EXISTS) agrees
 * with what the library believes.
 *
 * <p>Replies: {@link Status} (+), {@link ServerError} (-), Long (:), byte[] (a bulk
 * string), null (a null bulk or array), List&lt;Object&gt; (an array).
 */
final class Plain implements AutoCloseable {

    /** A simple-string reply, the text after the '+'. */
    record Status(String text) {
        @Override
        public String toString() {
            return "+" + text;
        }
    }

    /** An error reply, the text after the '-'. */
    record ServerError(String text) {
        @Override
        public String toString() {
            return "-" + text;
        }
    }

    private final Socket socket;
    private final InputStream in;
    private final OutputStream out;

    Plain(int port) throws IOException {
        socket = new Socket();
        socket.connect(new InetSocketAddress("127.0.0.1", port), 5000);
        socket.setSoTimeout(10_000);
        socket.setTcpNoDelay(true);
        in = new BufferedInputStream(socket.getInputStream());
        out = socket.getOutputStream();
    }

    @Override
    public void close() {
        try {
            socket.close();
        } catch (IOException ignored) {
            // closing a checker connection at the end of a run
        }
    }

    private String line() throws IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        while (true) {
            int c = in.read();
            if (c < 0) {
                throw new EOFException("plain: the server closed the connection");
            }
            if (c == '\n') {
                byte[] l = b.toByteArray();
                if (l.length == 0 || l[l.length - 1] != '\r') {
                    throw new IOException("plain: line without CRLF: " + show(l));
                }
                return new String(l, 0, l.length - 1, StandardCharsets.UTF_8);
            }
            b.write(c);
        }
    }

    private Object reply() throws IOException {
        String l = line();
        if (l.isEmpty()) {
            throw new IOException("plain: empty reply line");
        }
        String rest = l.substring(1);
        switch (l.charAt(0)) {
            case '+':
                return new Status(rest);
            case '-':
                return new ServerError(rest);
            case ':':
                try {
                    return Long.parseLong(rest);
                } catch (NumberFormatException e) {
                    throw new IOException("plain: bad integer " + show(rest));
                }
            case '$': {
                int n = Integer.parseInt(rest);
                if (n < 0) {
                    return null;
                }
                byte[] b = in.readNBytes(n + 2);
                if (b.length != n + 2 || b[n] != '\r' || b[n + 1] != '\n') {
                    throw new IOException("plain: short or unterminated bulk string");
                }
                return Arrays.copyOf(b, n);
            }
            case '*': {
                int n = Integer.parseInt(rest);
                if (n < 0) {
                    return null;
                }
                List<Object> a = new ArrayList<>(n);
                for (int i = 0; i < n; i++) {
                    a.add(reply());
                }
                return a;
            }
            default:
                throw new IOException("plain: unexpected RESP2 reply " + show(l));
        }
    }

    /** Sends a command and returns its reply, an error reply as a ServerError value. */
    Object raw(Object... args) throws IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        b.writeBytes(("*" + args.length + "\r\n").getBytes(StandardCharsets.UTF_8));
        for (Object a : args) {
            byte[] s = a instanceof byte[] ? (byte[]) a : String.valueOf(a).getBytes(StandardCharsets.UTF_8);
            b.writeBytes(("$" + s.length + "\r\n").getBytes(StandardCharsets.UTF_8));
            b.writeBytes(s);
            b.writeBytes("\r\n".getBytes(StandardCharsets.UTF_8));
        }
        out.write(b.toByteArray());
        out.flush();
        return reply();
    }

    /** raw, with an error reply turned into a failure. */
    Object cmd(Object... args) throws IOException {
        Object r = raw(args);
        if (r instanceof ServerError e) {
            throw new CaseFail("server error to " + args[0] + ": " + e.text());
        }
        return r;
    }

    long integer(Object... args) throws IOException {
        Object r = cmd(args);
        if (!(r instanceof Long n)) {
            throw new CaseFail("server: " + Arrays.toString(args) + " replied " + show(r));
        }
        return n;
    }

    /** The value as a string, or null if the key does not exist. */
    String get(String key) throws IOException {
        Object r = cmd("GET", key);
        if (r == null) {
            return null;
        }
        if (!(r instanceof byte[] b)) {
            throw new CaseFail("server: GET " + key + " replied " + show(r));
        }
        return new String(b, StandardCharsets.UTF_8);
    }

    /** key holds exactly owner and its PTTL is within (ttl - slack, ttl]; returns the PTTL. */
    long expectOwner(String key, String owner, long ttlMs, long slackMs) throws IOException {
        String got = get(key);
        if (!owner.equals(got)) {
            throw new CaseFail("server: GET " + key + " = " + show(got) + ", the library believes the owner is " + show(owner));
        }
        long pttl = integer("PTTL", key);
        if (!(pttl > ttlMs - slackMs && pttl <= ttlMs)) {
            throw new CaseFail(String.format("server: PTTL %s = %d, expected about %d ms (within (%d, %d])",
                    key, pttl, ttlMs, ttlMs - slackMs, ttlMs));
        }
        return pttl;
    }

    void expectGone(String key) throws IOException {
        long n = integer("EXISTS", key);
        if (n != 0) {
            throw new CaseFail("server: EXISTS " + key + " = " + n + " after release, expected 0 (GET=" + show(get(key)) + ")");
        }
    }

    /** LOCK.INFO's owner and token, or null if the lock is free. */
    record LockInfo(String owner, long token) {
    }

    LockInfo lockInfo(String key) throws IOException {
        Object r = cmd("LOCK.INFO", key);
        if (r == null) {
            return null;
        }
        String[] names = {"owner", "token", "ttl-ms", "waiters", "next-waiter"};
        if (!(r instanceof List<?> a) || a.size() != 10) {
            throw new CaseFail("server: LOCK.INFO " + key + " = " + show(r));
        }
        for (int i = 0; i < names.length; i++) {
            if (!(a.get(2 * i) instanceof byte[] b) || !names[i].equals(new String(b, StandardCharsets.UTF_8))) {
                throw new CaseFail("server: LOCK.INFO " + key + " = " + show(r));
            }
        }
        if (!(a.get(1) instanceof byte[] o) || !(a.get(3) instanceof Long t)) {
            throw new CaseFail("server: LOCK.INFO " + key + " = " + show(r));
        }
        return new LockInfo(new String(o, StandardCharsets.UTF_8), t);
    }

    /** LOCK.INFO shows owner; returns its fencing token. */
    long expectTokenOwner(String key, String owner) throws IOException {
        LockInfo i = lockInfo(key);
        if (i == null || !i.owner().equals(owner) || i.token() <= 0) {
            throw new CaseFail("server: LOCK.INFO " + key + " = " + i + ", expected owner " + show(owner));
        }
        return i.token();
    }

    /** SCRIPT EXISTS for sha (computed by the caller from the script's text). */
    boolean scriptCached(String sha) throws IOException {
        Object r = cmd("SCRIPT", "EXISTS", sha);
        if (r instanceof List<?> a && a.size() == 1 && a.get(0) instanceof Long n && (n == 0 || n == 1)) {
            return n == 1;
        }
        throw new CaseFail("server: SCRIPT EXISTS replied " + show(r));
    }

    /** Renders a reply (or a value a library returned) for a message. */
    static String show(Object r) {
        if (r == null) {
            return "(nil)";
        }
        if (r instanceof byte[] b) {
            return show(new String(b, StandardCharsets.UTF_8));
        }
        if (r instanceof String s) {
            StringBuilder q = new StringBuilder("\"");
            for (char c : s.toCharArray()) {
                if (c == '"' || c == '\\') {
                    q.append('\\').append(c);
                } else if (c < 0x20) {
                    q.append(String.format("\\x%02x", (int) c));
                } else {
                    q.append(c);
                }
            }
            return q.append('"').toString();
        }
        if (r instanceof List<?> l) {
            StringBuilder s = new StringBuilder("[");
            for (int i = 0; i < l.size(); i++) {
                if (i > 0) {
                    s.append(' ');
                }
                s.append(show(l.get(i)));
            }
            return s.append(']').toString();
        }
        if (r instanceof Status || r instanceof ServerError || r instanceof Long) {
            return r.toString();
        }
        return r + " (" + r.getClass().getSimpleName() + ")";
    }
}
