//! TLS (issue 14), against the real binary with certificates made by
//! `openssl`: the redis crate, redis-cli and a bare rustls client on the TLS
//! port; `--tls-auth-clients yes|optional|no`; reloading certificates on
//! SIGHUP and `CONFIG SET`; and a three-node cluster whose peers speak
//! mutual TLS, refusing a peer whose certificate the cluster's CA did not
//! sign.

mod cluster_support;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::{free_ports, q, TestServer};
use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A certificate and its key, as PEM files.
#[derive(Clone)]
struct Pem {
    cert: PathBuf,
    key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("run openssl (Debian: openssl)");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A self-signed CA named `name` in `dir`.
fn make_ca(dir: &Path, name: &str) -> Pem {
    let (cert, key) = (format!("{name}.crt"), format!("{name}.key"));
    openssl(
        dir,
        &[
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", &key,
            "-out", &cert, "-days", "30", "-subj", &format!("/CN={name}"),
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    Pem { cert: dir.join(cert), key: dir.join(key) }
}

/// A certificate for `name` signed by `ca`, valid for 127.0.0.1 and
/// localhost, for servers and clients alike.
fn issue(dir: &Path, ca: &Pem, name: &str) -> Pem {
    let (cert, key, csr, ext) = (format!("{name}.crt"), format!("{name}.key"), format!("{name}.csr"), format!("{name}.ext"));
    std::fs::write(
        dir.join(&ext),
        "basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", &key,
            "-out", &csr, "-subj", &format!("/CN={name}"),
        ],
    );
    let (ca_cert, ca_key) = (ca.cert.to_str().unwrap(), ca.key.to_str().unwrap());
    openssl(
        dir,
        &[
            "x509", "-req", "-in", &csr, "-CA", ca_cert, "-CAkey", ca_key, "-CAcreateserial", "-out", &cert, "-days",
            "30", "-extfile", &ext,
        ],
    );
    Pem { cert: dir.join(cert), key: dir.join(key) }
}

/// The certificates of one test: a CA with a server and a client
/// certificate, and a stranger CA with a certificate of its own.
struct Pki {
    _dir: tempfile::TempDir,
    ca: Pem,
    server: Pem,
    client: Pem,
    other_ca: Pem,
    stranger: Pem,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::Builder::new().prefix("raftlock-tls-").tempdir().unwrap();
        let p = dir.path();
        let ca = make_ca(p, "ca");
        let server = issue(p, &ca, "server");
        let client = issue(p, &ca, "client");
        let other_ca = make_ca(p, "other-ca");
        let stranger = issue(p, &other_ca, "stranger");
        Pki { _dir: dir, ca, server, client, other_ca, stranger }
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A node with a plain port and a TLS port.
fn tls_server(pki: &Pki, auth_clients: &str) -> (TestServer, u16) {
    let tls_port = free_ports(1)[0].to_string();
    let server = TestServer::start_with_env(&[
        ("RAFTLOCK_TLS_PORT", &tls_port),
        ("RAFTLOCK_TLS_CERT_FILE", s(&pki.server.cert)),
        ("RAFTLOCK_TLS_KEY_FILE", s(&pki.server.key)),
        ("RAFTLOCK_TLS_CA_CERT_FILE", s(&pki.ca.cert)),
        ("RAFTLOCK_TLS_AUTH_CLIENTS", auth_clients),
    ]);
    (server, tls_port.parse().unwrap())
}

/// Over TLS to `port` (trusting `ca`, showing `client` if given): sends
/// PING and returns the first reply line, or why there was none.
fn tls_ping(port: u16, ca: &Path, client: Option<&Pem>) -> Result<String, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let config = match client {
        Some(pem) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(&pem.cert).unwrap().map(|c| c.unwrap()).collect(),
                PrivateKeyDer::from_pem_file(&pem.key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let work = async {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
            let name = ServerName::try_from("127.0.0.1").unwrap();
            let mut tls = connector.connect(name, tcp).await.map_err(|e| format!("handshake: {e}"))?;
            tls.write_all(b"*1\r\n$4\r\nPING\r\n").await.map_err(|e| format!("write: {e}"))?;
            let mut got = Vec::new();
            let mut buf = [0u8; 256];
            while !got.ends_with(b"\r\n") {
                match tls.read(&mut buf).await {
                    Ok(0) => return Err("closed".to_string()),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) => return Err(format!("read: {e}")),
                }
            }
            Ok(String::from_utf8_lossy(&got).trim_end().to_string())
        };
        tokio::time::timeout(Duration::from_secs(10), work).await.unwrap_or_else(|_| Err("timed out".into()))
    })
}

/// Over TLS (with `client`'s certificate): sends `argv`, then reads
/// slowly, so the server keeps finding the socket full; Ok once `expected`
/// bytes arrived, or why they did not.
fn tls_read_slowly(port: u16, ca: &Path, client: &Pem, argv: &[&str], expected: usize) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            CertificateDer::pem_file_iter(&client.cert).unwrap().map(|c| c.unwrap()).collect(),
            PrivateKeyDer::from_pem_file(&client.key).unwrap(),
        )
        .unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
        let mut tls = connector.connect(ServerName::try_from("127.0.0.1").unwrap(), tcp).await.map_err(|e| e.to_string())?;
        let mut cmd = format!("*{}\r\n", argv.len());
        for a in argv {
            cmd.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        tls.write_all(cmd.as_bytes()).await.map_err(|e| e.to_string())?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut got = 0;
        let mut buf = vec![0u8; 16384];
        while got < expected {
            match tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf)).await {
                Ok(Ok(0)) => return Err(format!("closed after {got} of {expected} bytes")),
                Ok(Ok(n)) => got += n,
                Ok(Err(e)) => return Err(e.to_string()),
                Err(_) => return Err(format!("the rest of the reply never came ({got} of {expected} bytes arrived)")),
            }
            if got % (1 << 20) < 16384 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Ok(())
    })
}

fn redis_cli(args: &[&str]) -> (bool, String) {
    let out = Command::new("redis-cli").args(args).output().expect("run redis-cli (Debian: redis-tools)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success() && !text.contains("Error"), text.trim().to_string())
}

/// The redis crate over TLS, trusting the test CA, with `client` if given.
fn rust_client(port: u16, pki: &Pki, client: Option<&Pem>) -> redis::RedisResult<redis::Connection> {
    let certs = redis::TlsCertificates {
        client_tls: client.map(|c| redis::ClientTlsConfig {
            client_cert: std::fs::read(&c.cert).unwrap(),
            client_key: std::fs::read(&c.key).unwrap(),
        }),
        root_cert: Some(std::fs::read(&pki.ca.cert).unwrap()),
    };
    let client = redis::Client::build_with_tls(format!("rediss://127.0.0.1:{port}/"), certs)?;
    client.get_connection_with_timeout(Duration::from_secs(10))
}

/// A TLS listener with a certificate of another CA, counting the
/// connections made to it and those that got through the handshake and
/// sent it data.
struct StrangerPeer {
    port: u16,
    counts: Arc<std::sync::Mutex<(usize, usize)>>,
}

impl StrangerPeer {
    fn start(pem: &Pem) -> StrangerPeer {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                CertificateDer::pem_file_iter(&pem.cert).unwrap().map(|c| c.unwrap()).collect(),
                PrivateKeyDer::from_pem_file(&pem.key).unwrap(),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let counts = Arc::new(std::sync::Mutex::new((0, 0)));
        let seen = counts.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((socket, _)) = listener.accept().await {
                    seen.lock().unwrap().0 += 1;
                    let (acceptor, seen) = (acceptor.clone(), seen.clone());
                    tokio::spawn(async move {
                        if let Ok(mut tls) = acceptor.accept(socket).await {
                            let mut buf = [0u8; 64];
                            if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(2), tls.read(&mut buf)).await {
                                if n > 0 {
                                    seen.lock().unwrap().1 += 1;
                                }
                            }
                        }
                    });
                }
            });
        });
        StrangerPeer { port, counts }
    }

    fn attempts(&self) -> usize {
        self.counts.lock().unwrap().0
    }

    fn leaks(&self) -> usize {
        self.counts.lock().unwrap().1
    }
}

#[test]
fn clients_use_the_tls_port_with_a_certificate_and_are_refused_without_one() {
    let pki = Pki::new();
    let (server, port) = tls_server(&pki, "yes");

    // The redis crate: plain commands, a lock and its fencing token.
    let mut con = rust_client(port, &pki, Some(&pki.client)).expect("TLS connection with a client certificate");
    assert_eq!(q(&mut con, &["SET", "k", "v"]).unwrap(), Value::Okay);
    assert_eq!(q(&mut con, &["GET", "k"]).unwrap(), Value::BulkString(b"v".to_vec()));
    assert!(matches!(q(&mut con, &["LOCK.ACQUIRE", "orders:1", "me", "10000"]).unwrap(), Value::Int(t) if t > 0));

    // redis-cli --tls.
    let port_s = port.to_string();
    let (ok, text) = redis_cli(&[
        "-p", &port_s, "--tls", "--cacert", s(&pki.ca.cert), "--cert", s(&pki.client.cert), "--key", s(&pki.client.key),
        "GET", "k",
    ]);
    assert!(ok && text == "v", "redis-cli --tls with a certificate: {text}");

    // Without a client certificate: refused, by every client.
    let (ok, text) = redis_cli(&["-p", &port_s, "--tls", "--cacert", s(&pki.ca.cert), "PING"]);
    assert!(!ok && !text.contains("PONG"), "redis-cli without a certificate was served: {text}");
    assert!(rust_client(port, &pki, None).and_then(|mut c| q(&mut c, &["PING"])).is_err());
    let refused = tls_ping(port, &pki.ca.cert, None).expect_err("served without a certificate");
    assert!(refused.contains("CertificateRequired"), "{refused}");
    // With a certificate some other CA signed: refused too.
    let refused = tls_ping(port, &pki.ca.cert, Some(&pki.stranger)).expect_err("a certificate of another CA was accepted");
    assert!(refused.contains("UnknownCA"), "{refused}");
    assert_eq!(tls_ping(port, &pki.ca.cert, Some(&pki.client)).unwrap(), "+PONG");

    // A plain-text client on the TLS port is not served.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Write::write_all(&mut raw, b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut buf = [0u8; 64];
    let n = std::io::Read::read(&mut raw, &mut buf).unwrap_or(0);
    assert!(!String::from_utf8_lossy(&buf[..n]).contains("PONG"), "plain text served on the TLS port");

    // The plain port stays open beside it and sees the same data.
    let mut plain = server.client();
    assert_eq!(q(&mut plain, &["GET", "k"]).unwrap(), Value::BulkString(b"v".to_vec()));

    // A reply far larger than the socket buffers arrives whole over TLS (the
    // end of it must not stay in the TLS session's buffer).
    let big = "x".repeat(6 << 20);
    let keys: Vec<String> = (0..5).map(|i| format!("big{i}")).collect();
    for k in &keys {
        assert_eq!(q(&mut plain, &["SET", k, &big]).unwrap(), Value::Okay);
    }
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(|k| k.as_str()));
    let expected = 4 + keys.len() * (format!("${}\r\n", big.len()).len() + big.len() + 2);
    con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    match q(&mut con, &mget) {
        Ok(Value::Array(values)) => assert_eq!(values.len(), keys.len()),
        other => panic!("a large reply over TLS: {:?}", other.map(|_| "not an array")),
    }
    for _ in 0..3 {
        assert_eq!(tls_read_slowly(port, &pki.ca.cert, &pki.client, &mget, expected), Ok(()));
    }
    let params = common::pairs(&q(&mut plain, &["CONFIG", "GET", "tls-*"]).unwrap());
    let get = |name: &str| common::lookup(&params, name).and_then(common::as_text);
    assert_eq!(get("tls-port").as_deref(), Some(port_s.as_str()));
    assert_eq!(get("tls-auth-clients").as_deref(), Some("yes"));
}

#[test]
fn tls_auth_clients_optional_and_no() {
    let pki = Pki::new();
    let (server, port) = tls_server(&pki, "optional");
    // Optional: no certificate is fine, one of the CA is fine, a stranger's is not.
    assert_eq!(tls_ping(port, &pki.ca.cert, None).unwrap(), "+PONG");
    assert_eq!(tls_ping(port, &pki.ca.cert, Some(&pki.client)).unwrap(), "+PONG");
    assert!(tls_ping(port, &pki.ca.cert, Some(&pki.stranger)).is_err());

    let mut plain = server.client();
    assert_eq!(q(&mut plain, &["CONFIG", "SET", "tls-auth-clients", "yes"]).unwrap(), Value::Okay);
    assert!(tls_ping(port, &pki.ca.cert, None).is_err());
    assert_eq!(tls_ping(port, &pki.ca.cert, Some(&pki.client)).unwrap(), "+PONG");

    // No: clients are not asked for a certificate.
    assert_eq!(q(&mut plain, &["CONFIG", "SET", "tls-auth-clients", "no"]).unwrap(), Value::Okay);
    assert_eq!(tls_ping(port, &pki.ca.cert, None).unwrap(), "+PONG");
    let e = common::expect_err(q(&mut plain, &["CONFIG", "SET", "tls-auth-clients", "maybe"]));
    assert!(e.contains("tls-auth-clients"), "{e}");
}

#[test]
fn certificates_reload_on_sighup_and_config_set() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    // The node reads its certificate from files the operator replaces.
    let live = Pem { cert: dir.path().join("live.crt"), key: dir.path().join("live.key") };
    std::fs::copy(&pki.server.cert, &live.cert).unwrap();
    std::fs::copy(&pki.server.key, &live.key).unwrap();
    let tls_port = free_ports(1)[0];
    let mut server = TestServer::start_with_env(&[
        ("RAFTLOCK_TLS_PORT", &tls_port.to_string()),
        ("RAFTLOCK_TLS_CERT_FILE", s(&live.cert)),
        ("RAFTLOCK_TLS_KEY_FILE", s(&live.key)),
        ("RAFTLOCK_TLS_AUTH_CLIENTS", "no"),
    ]);
    assert_eq!(tls_ping(tls_port, &pki.ca.cert, None).unwrap(), "+PONG");
    assert!(tls_ping(tls_port, &pki.other_ca.cert, None).is_err(), "trusted a certificate of another CA");

    // New files: nothing changes until SIGHUP.
    std::fs::copy(&pki.stranger.cert, &live.cert).unwrap();
    std::fs::copy(&pki.stranger.key, &live.key).unwrap();
    assert_eq!(tls_ping(tls_port, &pki.ca.cert, None).unwrap(), "+PONG");
    let pid = server.pid().unwrap().to_string();
    assert!(Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    common::poll_until(Duration::from_secs(10), "the new certificate after SIGHUP", || {
        tls_ping(tls_port, &pki.other_ca.cert, None).ok()
    });
    assert!(tls_ping(tls_port, &pki.ca.cert, None).is_err(), "still shows the old certificate");
    assert!(server.is_running(), "SIGHUP stopped the node");

    // A reload that fails keeps what is in use.
    std::fs::write(&live.cert, "not a certificate").unwrap();
    assert!(Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    std::thread::sleep(Duration::from_millis(300));
    assert!(server.is_running());
    assert_eq!(tls_ping(tls_port, &pki.other_ca.cert, None).unwrap(), "+PONG");

    // CONFIG SET: certificate and key together, in one call.
    let mut plain = server.client();
    let e = common::expect_err(q(&mut plain, &["CONFIG", "SET", "tls-cert-file", s(&pki.server.cert)]));
    assert!(e.contains("Unable to update TLS configuration"), "a certificate without its key was taken: {e}");
    assert_eq!(tls_ping(tls_port, &pki.other_ca.cert, None).unwrap(), "+PONG");
    let set = q(&mut plain, &["CONFIG", "SET", "tls-cert-file", s(&pki.server.cert), "tls-key-file", s(&pki.server.key)]);
    assert_eq!(set.unwrap(), Value::Okay);
    assert_eq!(tls_ping(tls_port, &pki.ca.cert, None).unwrap(), "+PONG");
    let params = common::pairs(&q(&mut plain, &["CONFIG", "GET", "tls-cert-file"]).unwrap());
    assert_eq!(common::lookup(&params, "tls-cert-file").and_then(common::as_text).as_deref(), Some(s(&pki.server.cert)));
}

#[test]
fn a_cluster_over_mutual_tls_refuses_a_peer_without_the_cas_certificate() {
    use cluster_support::{Cluster, Opts};
    let pki = Pki::new();
    let opts = Opts {
        extra_args: [
            "--tls-cluster", "yes", "--tls-cert-file", s(&pki.server.cert), "--tls-key-file", s(&pki.server.key),
            "--tls-ca-cert-file", s(&pki.ca.cert),
        ]
        .map(String::from)
        .to_vec(),
        ..Default::default()
    };
    let c = Cluster::start(3, opts);
    let leader = c.wait_leader(&c.ids(), Duration::from_secs(30));
    let follower = c.ids().into_iter().find(|&id| id != leader).unwrap();
    // A write through a follower is forwarded to the leader over TLS, and
    // replicated back over TLS.
    let mut con = c.node(follower).client();
    assert!(matches!(q(&mut con, &["LOCK.ACQUIRE", "orders:1", "me", "60000"]).unwrap(), Value::Int(t) if t > 0));
    for id in c.ids() {
        let mut con = c.node(id).client();
        common::poll_until(Duration::from_secs(10), "the lock on every node", || {
            matches!(q(&mut con, &["LOCK.INFO", "orders:1"]), Ok(Value::Array(_)) | Ok(Value::Map(_))).then_some(())
        });
    }

    // A stranger at the peer port: a certificate from another CA, no
    // certificate at all, or no TLS.
    let peer_port: u16 = c.node(leader).peer_addr().rsplit(':').next().unwrap().parse().unwrap();
    for (client, alert) in [(Some(&pki.stranger), "UnknownCA"), (None, "CertificateRequired")] {
        let refused = tls_ping(peer_port, &pki.ca.cert, client).expect_err("a stranger was let in at the peer port");
        assert!(refused.contains(alert), "expected the {alert} alert, got: {refused}");
    }
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", peer_port)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Write::write_all(&mut raw, &[0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    let mut buf = [0u8; 64];
    let n = std::io::Read::read(&mut raw, &mut buf).unwrap_or(0);
    assert!(n == 0 || buf[0] == 0x15, "a plain-text peer got an answer: {:?}", &buf[..n]);
    let logs = c.node(leader).logs();
    assert!(logs.contains("refused a peer connection: TLS handshake failed"), "{logs}");

    // The other way round: told to reach a stranger (RAFT.NODE ADD of an
    // address where a node with another CA's certificate listens), the
    // leader's TLS refuses it, and the stranger never reads a byte of the
    // peer protocol.
    let stranger = StrangerPeer::start(&pki.stranger);
    let adding = {
        let url = c.node(leader).url();
        let peer = format!("127.0.0.1:{}", stranger.port);
        std::thread::spawn(move || {
            let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
            q(&mut con, &["RAFT.NODE", "ADD", "9", &peer, "127.0.0.1:1"])
        })
    };
    common::poll_until(Duration::from_secs(20), "the leader trying to reach the stranger", || {
        (stranger.attempts() >= 2).then_some(())
    });
    assert_eq!(stranger.leaks(), 0, "the leader finished a TLS handshake with a node the CA did not sign");
    let added = adding.join().unwrap();
    assert!(added.is_err(), "the stranger was added: {added:?}");
    let _ = q(&mut c.node(leader).client(), &["RAFT.NODE", "REMOVE", "9"]);

    // The cluster is still up and the same.
    let mut con = c.node(leader).client();
    assert!(matches!(q(&mut con, &["LOCK.ACQUIRE", "orders:2", "me", "60000"]).unwrap(), Value::Int(t) if t > 0));
    common::poll_until(Duration::from_secs(10), "the same RAFT.DIGEST on every node", || {
        let digests: Vec<String> =
            c.ids().into_iter().map(|id| format!("{:?}", q(&mut c.node(id).client(), &["RAFT.DIGEST"]).unwrap())).collect();
        digests.windows(2).all(|w| w[0] == w[1]).then_some(())
    });
    let mut con = c.node(follower).client();
    assert!(matches!(q(&mut con, &["LOCK.INFO", "orders:2"]).unwrap(), Value::Array(_) | Value::Map(_)));
}

#[test]
fn a_node_can_serve_tls_only() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(2);
    let (tls_port, peer_port) = (ports[0], ports[1]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_raftlock"))
        .args(["--port", "0", "--tls-port", &tls_port.to_string(), "--peer-port", &peer_port.to_string()])
        .args(["--tls-cert-file", s(&pki.server.cert), "--tls-key-file", s(&pki.server.key)])
        .args(["--tls-ca-cert-file", s(&pki.ca.cert), "--metrics-addr", "off", "--data-dir"])
        .arg(dir.path().join("data"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start raftlock");
    let served = common::poll_until(Duration::from_secs(30), "the TLS-only node", || {
        tls_ping(tls_port, &pki.ca.cert, Some(&pki.client)).ok()
    });
    assert_eq!(served, "+PONG");
    let mut con = rust_client(tls_port, &pki, Some(&pki.client)).unwrap();
    assert!(matches!(q(&mut con, &["LOCK.ACQUIRE", "l", "me", "10000"]).unwrap(), Value::Int(t) if t > 0));
    let params = common::pairs(&q(&mut con, &["CONFIG", "GET", "port"]).unwrap());
    assert_eq!(common::lookup(&params, "port").and_then(common::as_text).as_deref(), Some("0"));
    // The operator's commands speak TLS too.
    let addr = format!("127.0.0.1:{tls_port}");
    let tls_args = ["--tls", "--tls-ca-cert-file", s(&pki.ca.cert), "--tls-cert-file", s(&pki.client.cert), "--tls-key-file", s(&pki.client.key)];
    let status = Command::new(env!("CARGO_BIN_EXE_raftlock")).args(["status", "--addr", &addr]).args(tls_args).output().unwrap();
    let table = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success() && table.contains("leader"), "raftlock status over TLS: {table}{}", String::from_utf8_lossy(&status.stderr));
    let file = dir.path().join("tls.backup");
    let backup = Command::new(env!("CARGO_BIN_EXE_raftlock")).args(["backup", "--addr", &addr]).args(tls_args).arg(&file).output().unwrap();
    assert!(backup.status.success(), "raftlock backup over TLS: {}", String::from_utf8_lossy(&backup.stderr));
    assert!(String::from_utf8_lossy(&backup.stdout).contains("1 keys"), "{}", String::from_utf8_lossy(&backup.stdout));
    // Without the CA it does not trust the node; plain TCP to a TLS port fails.
    let untrusted = Command::new(env!("CARGO_BIN_EXE_raftlock")).args(["status", "--addr", &addr, "--tls"]).output().unwrap();
    assert!(!untrusted.status.success() && String::from_utf8_lossy(&untrusted.stderr).contains("--tls-ca-cert-file"));
    let plain = Command::new(env!("CARGO_BIN_EXE_raftlock")).args(["status", "--addr", &addr]).output().unwrap();
    assert!(!plain.status.success());
    // Without --tls-port, --port 0 is refused: there would be no client port.
    let refused = Command::new(env!("CARGO_BIN_EXE_raftlock"))
        .args(["--port", "0", "--data-dir"])
        .arg(dir.path().join("other"))
        .output()
        .unwrap();
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("--tls-port"));
    let _ = child.kill();
    let _ = child.wait();
}
