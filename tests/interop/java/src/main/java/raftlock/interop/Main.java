package raftlock.interop;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.security.SecureRandom;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;

/**
 * Java clients against raftlock, unchanged (tests/interop/run.sh, group `java`):
 *
 * <ul>
 * <li>Jedis (the {@code Jedis} class, in the protocol asked for through
 * {@code DefaultJedisClientConfig.protocol}): the common lock recipe, SET key token NX PX
 * through {@code SetParams}, a second SET NX on a held key refused (null), the
 * compare-and-delete release through EVALSHA of a script loaded with {@code scriptLoad},
 * falling back to EVAL on NOSCRIPT; WATCH/MULTI/EXEC extending a held lock, and a
 * transaction aborted because another client (a second Jedis, then the plain checker)
 * changed the watched key; a crashed holder's short lease expiring;
 * <li>Lettuce (sync API, {@code ClientOptions.protocolVersion} RESP2 or RESP3): the same
 * recipe with {@code SetArgs} nx/px and evalsha/eval with {@code ScriptOutputType.INTEGER},
 * WATCH/MULTI/EXEC with {@code TransactionResult.wasDiscarded()}, expiry;
 * <li>Redisson ({@code Config.setProtocol} RESP2 or RESP3, single server, default codec):
 * RLock (lease, tryLock contended, the watchdog's renewal, forceUnlock, reentrancy, a
 * waiter woken by the unlock PUBLISH, a holder JVM paused with SIGSTOP past its lease),
 * RFairLock's FIFO order, RReadWriteLock, RSemaphore, RPermitExpirableSemaphore,
 * RCountDownLatch, RFencedLock's tokens; see {@link RedissonCases}.
 * </ul>
 *
 * <p>A case passes only if the library reports success AND a plain RESP2 client on a raw
 * socket ({@link Plain}, independent of both libraries) reads back the state the library
 * believes in. Each case prints RESULT&lt;TAB&gt;library&lt;TAB&gt;case&lt;TAB&gt;PASS|FAIL&lt;TAB&gt;detail.
 *
 * <pre>java -jar raftlock-interop-java.jar --port P --check-port C --prefix X --protocol 2|3 [--only jedis,lettuce,redisson] [--trace FILE]</pre>
 *
 * <p>{@code --trace FILE} puts a logging proxy ({@link TraceProxy}) between Redisson and the
 * server: every command and reply is written to FILE, and a failing case's detail names
 * the last command the server answered with an error.
 */
public final class Main {

    /** The command line. */
    record Args(int port, int checkPort, String prefix, int protocol, String trace) {
        String tag() {
            return "resp" + protocol;
        }
    }

    public static void main(String[] argv) {
        if (argv.length > 0 && argv[0].equals("--holder")) {
            // The paused holder of RedissonCases, in a JVM of its own.
            RedissonCases.holder(Arrays.copyOfRange(argv, 1, argv.length));
            return;
        }
        int port = 0, checkPort = 0, protocol = 3;
        String prefix = "interop", trace = null;
        Set<String> only = new LinkedHashSet<>(List.of("jedis", "lettuce", "redisson"));
        try {
            for (int i = 0; i < argv.length; i++) {
                String f = argv[i].replaceFirst("^--?", "");
                String v = f.contains("=") ? f.substring(f.indexOf('=') + 1) : argv[++i];
                switch (f.contains("=") ? f.substring(0, f.indexOf('=')) : f) {
                    case "port" -> port = Integer.parseInt(v);
                    case "check-port" -> checkPort = Integer.parseInt(v);
                    case "prefix" -> prefix = v;
                    case "protocol" -> protocol = Integer.parseInt(v);
                    case "trace" -> trace = v;
                    case "only" -> {
                        only.clear();
                        for (String g : v.split(",")) {
                            only.add(g.trim());
                        }
                    }
                    default -> throw new IllegalArgumentException("unknown flag " + argv[i]);
                }
            }
        } catch (RuntimeException e) {
            usage(e.toString());
        }
        if (port == 0 || checkPort == 0 || (protocol != 2 && protocol != 3)) {
            usage("--port and --check-port are required, --protocol is 2 or 3");
        }
        Args a = new Args(port, checkPort, prefix, protocol, trace);
        Harness h = new Harness();
        for (String g : only) {
            switch (g) {
                case "jedis" -> JedisCases.run(h, a);
                case "lettuce" -> LettuceCases.run(h, a);
                case "redisson" -> RedissonCases.run(h, a);
                default -> usage("unknown group " + g);
            }
        }
        System.out.flush();
        // Lettuce's event loops are shut down by LettuceCases, Redisson's by
        // RedissonCases; exit regardless of any thread a library left behind.
        System.exit(h.failed > 0 ? 1 : 0);
    }

    private static void usage(String why) {
        System.err.println(why);
        System.err.println("usage: raftlock-interop-java --port P --check-port C [--prefix X] [--protocol 2|3] [--only jedis,lettuce,redisson] [--trace FILE]");
        System.exit(2);
    }

    /** A case's body: throws CaseFail (or whatever the library threw) to fail. */
    interface Body {
        void run() throws Exception;
    }

    /** Runs cases and prints their RESULT lines. */
    static final class Harness {
        int failed;

        /** Runs fn and prints its RESULT line; true if it passed. */
        boolean check(String library, String name, Body fn) {
            long t0 = System.nanoTime();
            Throwable err = null;
            try {
                fn.run();
            } catch (Throwable e) {
                err = e;
            }
            return report(library, name, t0, err);
        }

        boolean report(String library, String name, long t0, Throwable err) {
            String took = String.format("%.1fs", (System.nanoTime() - t0) / 1e9);
            if (err == null) {
                System.out.printf("RESULT\t%s\t%s\tPASS\t%s%n", library, name, took);
                System.out.flush();
                return true;
            }
            failed++;
            String detail = String.join(" ", describe(err).trim().split("\\s+"));
            if (detail.length() > 400) {
                detail = detail.substring(0, 400);
            }
            System.out.printf("RESULT\t%s\t%s\tFAIL\t%s %s%n", library, name, took, detail);
            System.out.flush();
            if (!(err instanceof CaseFail)) {
                err.printStackTrace();
            }
            return false;
        }

        /** A CaseFail's message; for anything else the exception, its causes and where it was thrown. */
        static String describe(Throwable err) {
            if (err instanceof CaseFail) {
                return err.getMessage();
            }
            StringBuilder s = new StringBuilder(err.toString());
            for (Throwable c = err.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
                s.append(" (caused by ").append(c).append(')');
            }
            for (StackTraceElement f : err.getStackTrace()) {
                if (f.getClassName().startsWith("raftlock.interop.")) {
                    s.append(" at ").append(f.getFileName()).append(':').append(f.getLineNumber());
                    break;
                }
            }
            return s.toString();
        }
    }

    // --- helpers -------------------------------------------------------------

    private static final SecureRandom RANDOM = new SecureRandom();

    static String randomHex(int bytes) {
        byte[] b = new byte[bytes];
        RANDOM.nextBytes(b);
        return HexFormat.of().formatHex(b);
    }

    /** A key unique to this run and call. */
    static String unique(String prefix, String name) {
        return prefix + ":" + name + ":" + randomHex(4);
    }

    static String sha1Hex(String s) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-1").digest(s.getBytes(StandardCharsets.UTF_8)));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * The compare-and-delete release, as applications write it. The comment makes its
     * SHA1 unique to this run, library and protocol, so the first EVALSHA meets NOSCRIPT.
     */
    static String unlockScript(String prefix, String tag) {
        return "-- raftlock interop " + prefix + " " + tag + "\n"
                + "if redis.call(\"get\", KEYS[1]) == ARGV[1] then\n"
                + "  return redis.call(\"del\", KEYS[1])\n"
                + "else\n"
                + "  return 0\n"
                + "end";
    }

    /** The version of a library on the class path, from its jar's pom.properties. */
    static String version(String group, String artifact) {
        String path = "/META-INF/maven/" + group + "/" + artifact + "/pom.properties";
        try (InputStream in = Main.class.getResourceAsStream(path)) {
            if (in != null) {
                Properties p = new Properties();
                p.load(in);
                return p.getProperty("version", "?");
            }
        } catch (IOException ignored) {
            // fall through
        }
        return "?";
    }

    static void expect(boolean cond, String message) {
        if (!cond) {
            throw new CaseFail(message);
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CaseFail("interrupted");
        }
    }

    private Main() {
    }
}
