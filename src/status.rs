//! `raftlock status --addr host:port`: one table of every member of the
//! cluster the given node belongs to, for an operator's terminal.
//!
//! Asks the node for `RAFT.INFO`, then every member it lists (at its client
//! address) for `RAFT.INFO` and `INFO server`, over plain RESP with a short
//! timeout (or TLS with `--tls`). A member that does not answer gets a row saying why. Lag is the
//! leader's commit index minus the member's applied index; the clock offset
//! is the leader's last measurement of the member's wall clock against its
//! own (see `raft::peer`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(2);

/// What `raftlock status` is given.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "raftlock status", about = "Prints every member of the cluster: role, term, indexes, lag, version.")]
pub struct StatusArgs {
    /// Any member's client address.
    #[arg(long, default_value = "127.0.0.1:6379")]
    pub addr: String,
    /// The password (`AUTH`), if the cluster requires one.
    #[arg(long, env = "RAFTLOCK_STATUS_PASSWORD")]
    pub password: Option<String>,
    /// The ACL user to authenticate as, with --password.
    #[arg(long)]
    pub user: Option<String>,
    /// Connect with TLS (to nodes' TLS ports: with --tls, each member is
    /// reached at the client address it advertises, which is its TLS port
    /// when it serves TLS only). Needs --tls-ca-cert-file.
    #[arg(long)]
    pub tls: bool,
    /// CA certificates (PEM) the nodes' certificates must chain to.
    #[arg(long)]
    pub tls_ca_cert_file: Option<std::path::PathBuf>,
    /// A client certificate (PEM) to show, for nodes that ask for one.
    #[arg(long)]
    pub tls_cert_file: Option<std::path::PathBuf>,
    /// The private key of --tls-cert-file.
    #[arg(long)]
    pub tls_key_file: Option<std::path::PathBuf>,
}

/// A byte stream to a node: plain TCP, or TLS over it.
trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// One member's answers, or why there are none.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub id: String,
    pub addr: String,
    pub fields: Result<Vec<(String, String)>, String>,
}

impl Member {
    fn get(&self, k: &str) -> Option<&str> {
        self.fields.as_ref().ok()?.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str())
    }
}

/// A connection speaking just enough RESP2 for the operator's commands
/// (`status`, `backup`).
pub(crate) struct Conn {
    reader: BufReader<Box<dyn Stream>>,
}

impl Conn {
    fn open(addr: &str, args: &StatusArgs) -> Result<Conn, String> {
        Conn::open_waiting(addr, args, TIMEOUT)
    }

    /// Connects (within [`TIMEOUT`]) and authenticates; each reply may take
    /// up to `wait`.
    pub(crate) fn open_waiting(addr: &str, args: &StatusArgs, wait: Duration) -> Result<Conn, String> {
        let sock = addr.to_socket_addrs().map_err(|e| format!("{addr}: {e}"))?.next().ok_or(format!("{addr}: no address"))?;
        let stream = TcpStream::connect_timeout(&sock, TIMEOUT).map_err(|e| format!("{addr}: {e}"))?;
        stream.set_read_timeout(Some(wait)).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(wait)).map_err(|e| e.to_string())?;
        let stream = if args.tls { tls_stream(addr, stream, args)? } else { Box::new(stream) as Box<dyn Stream> };
        let mut conn = Conn { reader: BufReader::new(stream) };
        if let Some(password) = &args.password {
            let mut auth = vec!["AUTH"];
            if let Some(user) = &args.user {
                auth.push(user);
            }
            auth.push(password);
            conn.call(&auth)?;
        }
        Ok(conn)
    }

    /// Sends one command; the reply as text (a bulk or simple string), or
    /// the error it answered.
    pub(crate) fn call(&mut self, argv: &[&str]) -> Result<String, String> {
        self.call_bytes(argv, 16 << 20).map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// [`Conn::call`] for a reply of up to `max` bytes, as bytes.
    pub(crate) fn call_bytes(&mut self, argv: &[&str], max: usize) -> Result<Vec<u8>, String> {
        let mut req = format!("*{}\r\n", argv.len());
        for a in argv {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.reader.get_mut().write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        let mut line = String::new();
        (&mut self.reader).take(64 * 1024).read_line(&mut line).map_err(|e| e.to_string())?;
        let line = line.trim_end_matches(['\r', '\n']);
        match line.as_bytes().first() {
            Some(b'+') => Ok(line.as_bytes()[1..].to_vec()),
            Some(b'-') => Err(line[1..].to_string()),
            Some(b'$') => {
                let len: usize = line[1..].parse().map_err(|_| format!("bad reply {line:?}"))?;
                if len > max {
                    return Err(format!("reply of {len} bytes"));
                }
                // Grown as the bytes arrive, not allocated on the server's word.
                let mut body = Vec::new();
                (&mut self.reader).take(len as u64 + 2).read_to_end(&mut body).map_err(|e| e.to_string())?;
                if body.len() != len + 2 {
                    return Err(format!("the reply ended after {} of {len} bytes", body.len().saturating_sub(2)));
                }
                body.truncate(len);
                Ok(body)
            }
            _ => Err(format!("unexpected reply {line:?}")),
        }
    }
}

/// TLS over `stream`, checking the node's certificate against the CA and
/// the host of `addr`.
#[cfg(feature = "server")]
fn tls_stream(addr: &str, stream: TcpStream, args: &StatusArgs) -> Result<Box<dyn Stream>, String> {
    let ca = args.tls_ca_cert_file.as_deref().ok_or("--tls needs --tls-ca-cert-file")?;
    let pair = match (&args.tls_cert_file, &args.tls_key_file) {
        (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
        (None, None) => None,
        _ => return Err("--tls-cert-file and --tls-key-file go together".into()),
    };
    let config = crate::tls::operator_client(ca, pair)?;
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| format!("{addr}: {e}"))?;
    let conn = rustls::ClientConnection::new(config, name).map_err(|e| format!("{addr}: {e}"))?;
    Ok(Box::new(rustls::StreamOwned::new(conn, stream)))
}

#[cfg(not(feature = "server"))]
fn tls_stream(_: &str, _: TcpStream, _: &StatusArgs) -> Result<Box<dyn Stream>, String> {
    Err("this build has no TLS".into())
}

/// `field:value` lines (`# Section` headers and blank lines skipped).
fn fields(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn ask(addr: &str, args: &StatusArgs) -> Result<Vec<(String, String)>, String> {
    let mut conn = Conn::open(addr, args)?;
    let mut f = fields(&conn.call(&["RAFT.INFO"])?);
    f.extend(fields(&conn.call(&["INFO", "server"])?).into_iter().filter(|(k, _)| k == "raftlock_version"));
    Ok(f)
}

/// Every member of `args.addr`'s cluster, in id order.
pub fn collect(args: &StatusArgs) -> Result<Vec<Member>, String> {
    let first = ask(&args.addr, args)?;
    let members = first.iter().find(|(k, _)| k == "members").map(|(_, v)| v.clone()).unwrap_or_default();
    let mut out = Vec::new();
    // "id@peer/client,..."
    for m in members.split(',').filter(|m| !m.is_empty()) {
        let (id, addrs) = m.split_once('@').ok_or(format!("bad member {m:?}"))?;
        let client = addrs.split_once('/').map(|(_, c)| c).ok_or(format!("bad member {m:?}"))?;
        out.push(Member { id: id.to_string(), addr: client.to_string(), fields: ask(client, args) });
    }
    out.sort_by_key(|m| m.id.parse::<u64>().unwrap_or(u64::MAX));
    Ok(out)
}

/// The table: one row per member.
pub fn render(members: &[Member]) -> String {
    let leader = members.iter().find(|m| m.get("role") == Some("leader"));
    let leader_commit = leader.and_then(|m| m.get("commit_index")).and_then(|v| v.parse::<u64>().ok());
    // The leader measures every member's clock against its own.
    let offsets: Vec<(String, String)> = leader
        .and_then(|m| m.get("clock_offsets_ms"))
        .unwrap_or("")
        .split(',')
        .filter_map(|p| p.split_once('='))
        .map(|(id, ms)| (id.to_string(), ms.to_string()))
        .collect();
    let offset_of = |m: &Member| -> String {
        if leader.is_some_and(|l| l.id == m.id) {
            return "0 ms (leader)".into();
        }
        offsets.iter().find(|(id, _)| *id == m.id).map_or("-".into(), |(_, ms)| format!("{ms} ms"))
    };
    let header = ["id", "address", "role", "term", "commit", "applied", "last-log", "lag", "version", "clock-offset"];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for m in members {
        let mut row = vec![m.id.clone(), m.addr.clone()];
        match &m.fields {
            Err(e) => row.push(format!("unreachable: {e}")),
            Ok(_) => {
                let g = |k: &str| m.get(k).unwrap_or("-").to_string();
                let lag = match (leader_commit, m.get("applied_index").and_then(|v| v.parse::<u64>().ok())) {
                    (Some(c), Some(a)) => c.saturating_sub(a).to_string(),
                    _ => "-".into(),
                };
                row.extend([g("role"), g("term"), g("commit_index"), g("applied_index"), g("last_log_index"), lag, g("raftlock_version"), offset_of(m)]);
            }
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..header.len()).map(|i| rows.iter().filter_map(|r| r.get(i)).map(|c| c.len()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r.iter().enumerate().map(|(i, c)| if i + 1 < r.len() { format!("{c:<w$}", w = widths[i]) } else { c.clone() }).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Runs `raftlock status`: prints the table; exit status 0 if every member
/// answered and one of them leads, 1 if not, 2 if the node asked first did
/// not answer.
pub fn main(args: &StatusArgs) -> std::process::ExitCode {
    match collect(args) {
        Err(e) => {
            eprintln!("raftlock status: {e}");
            std::process::ExitCode::from(2)
        }
        Ok(members) => {
            print!("{}", render(&members));
            let healthy =
                members.iter().all(|m| m.fields.is_ok()) && members.iter().any(|m| m.get("role") == Some("leader"));
            if healthy {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, text: &str) -> Member {
        Member { id: id.into(), addr: format!("127.0.0.1:{id}"), fields: Ok(fields(text)) }
    }

    #[test]
    fn the_table_shows_each_member_and_its_lag_behind_the_leader() {
        let ms = vec![
            member("1", "role:leader\nterm:3\ncommit_index:100\napplied_index:100\nlast_log_index:100\nraftlock_version:0.1.0\nclock_offsets_ms:2=-3000,3=5000"),
            member("2", "role:follower\nterm:3\ncommit_index:90\napplied_index:88\nlast_log_index:95\nraftlock_version:0.1.0"),
            Member { id: "3".into(), addr: "127.0.0.1:3".into(), fields: Err("connection refused".into()) },
        ];
        let t = render(&ms);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[0].starts_with("id  address"), "{t}");
        let cols = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(cols(lines[1]), ["1", "127.0.0.1:1", "leader", "3", "100", "100", "100", "0", "0.1.0", "0", "ms", "(leader)"]);
        assert_eq!(cols(lines[2]), ["2", "127.0.0.1:2", "follower", "3", "90", "88", "95", "12", "0.1.0", "-3000", "ms"]);
        assert!(lines[3].contains("unreachable: connection refused"), "{t}");
    }

    #[test]
    fn fields_skip_headers() {
        assert_eq!(fields("# Server\r\nredis_version:7.2.4\r\n\r\nraftlock_version:0.1.0\r\n"), vec![
            ("redis_version".to_string(), "7.2.4".to_string()),
            ("raftlock_version".to_string(), "0.1.0".to_string())
        ]);
    }
}
