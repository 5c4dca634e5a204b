//! The metrics address: `/metrics` for Prometheus, and a live dashboard for
//! people (`/`), one self-contained page (no external assets) that charts
//! the operators' numbers from this node's own metrics.
//!
//! The node keeps its recent past so that the page has something to show
//! the moment it opens: every [`SAMPLE_EVERY`] it renders its metrics and
//! keeps the samples (not the help text) of the last [`HISTORY`], served at
//! `/history`. `/top` is `LOCK.TOP` as JSON. Requests are plain HTTP/1.1,
//! one per connection, a few at a time; anything else is refused.
//!
//! The page shows key names (the hot locks): keep the metrics address on a
//! trusted network, as the default (loopback) does. It writes every value
//! into the document as text, never as markup, so a key name cannot inject
//! anything.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The page, with its script and styles inline.
const PAGE: &str = include_str!("dashboard.html");
/// How often the node samples its own metrics for the page's history.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);
/// How far back the history goes.
pub const HISTORY: Duration = Duration::from_secs(600);
/// How often histograms are maintained (the recorder's upkeep).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);
/// Most requests served at once; more wait for their turn.
const MAX_CONNECTIONS: usize = 16;
/// The longest request head read.
const MAX_HEAD: usize = 8 * 1024;
/// Time a client has to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a whole request may take, answer included (a client that stops
/// reading must not keep its slot).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// The samples of the last [`HISTORY`]: (Unix ms, sample lines).
#[derive(Default)]
struct History {
    samples: Mutex<VecDeque<(u64, String)>>,
}

impl History {
    fn add(&self, unix_ms: u64, rendered: &str) {
        let lines: String =
            rendered.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).flat_map(|l| [l, "\n"]).collect();
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let keep = (HISTORY.as_millis() / SAMPLE_EVERY.as_millis()) as usize;
        while samples.len() >= keep {
            samples.pop_front();
        }
        samples.push_back((unix_ms, lines));
    }

    /// Every sample, oldest first, each after a line `# t <unix ms>`, then
    /// `# now <unix ms>` (the page aligns its own clock with this node's).
    fn render(&self, now_ms: u64) -> String {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::with_capacity(samples.iter().map(|(_, s)| s.len() + 24).sum::<usize>() + 24);
        for (t, lines) in samples.iter() {
            out.push_str(&format!("# t {t}\n"));
            out.push_str(lines);
        }
        out.push_str(&format!("# now {now_ms}\n"));
        out
    }
}

/// Serves the metrics address on `listener` until the process ends, and
/// keeps the recorder maintained and the history sampled.
pub async fn serve(listener: TcpListener, handle: PrometheusHandle) {
    let history = Arc::new(History::default());
    tokio::spawn({
        let (handle, history) = (handle.clone(), history.clone());
        async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut since_upkeep = Duration::ZERO;
            loop {
                tick.tick().await;
                since_upkeep += SAMPLE_EVERY;
                if since_upkeep >= UPKEEP_EVERY {
                    handle.run_upkeep();
                    since_upkeep = Duration::ZERO;
                }
                history.add(system_ms(), &handle.render());
            }
        }
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("metrics address: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // All slots taken: this one is closed at once, and accepting goes on.
        let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
        let (handle, history) = (handle.clone(), history.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &handle, &history)).await {
                Ok(Err(e)) => tracing::debug!("metrics address: {e}"),
                Err(_) => tracing::debug!("metrics address: a request took over {REQUEST_TIMEOUT:?}"),
                Ok(Ok(())) => {}
            }
            drop(slot);
        });
    }
}

/// Reads one request head and writes its answer.
async fn answer(mut stream: TcpStream, handle: &PrometheusHandle, history: &History) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let complete = tokio::time::timeout(READ_TIMEOUT, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
            if head.len() >= MAX_HEAD {
                return Ok(false);
            }
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Ok(false);
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>(true)
    })
    .await;
    let (status, kind, body) = match complete {
        Ok(Ok(true)) => route(&head, handle, history),
        Ok(Ok(false)) => ("400 Bad Request", "text/plain", "bad request\n".to_string()),
        Ok(Err(e)) => return Err(e),
        Err(_) => ("408 Request Timeout", "text/plain", "request timeout\n".to_string()),
    };
    let is_head = head.starts_with(b"HEAD ");
    let header = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nContent-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(header.as_bytes()).await?;
    if !is_head {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.shutdown().await
}

/// The answer to the request whose head is `head`: status, type, body.
fn route(head: &[u8], handle: &PrometheusHandle, history: &History) -> (&'static str, &'static str, String) {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    if method != "GET" && method != "HEAD" {
        return ("405 Method Not Allowed", "text/plain", "only GET and HEAD\n".into());
    }
    let path = target.split(['?', '#']).next().unwrap_or_default();
    match path {
        "/" | "/index.html" => ("200 OK", "text/html; charset=utf-8", PAGE.to_string()),
        "/metrics" => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", handle.render()),
        "/history" => ("200 OK", "text/plain; charset=utf-8", history.render(system_ms())),
        "/top" => ("200 OK", "application/json", top_json()),
        _ => ("404 Not Found", "text/plain", "not found: try / or /metrics\n".into()),
    }
}

/// The operating system's clock in Unix ms (not the node's wall clock,
/// which a test may shift): the page's timeline.
fn system_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// `LOCK.TOP 10` as JSON: `{"denials": [{"key": "...", "count": n}, ...], ...}`.
fn top_json() -> String {
    let rankings: Vec<String> = super::top::report(10)
        .into_iter()
        .map(|(ranking, keys)| {
            let keys: Vec<String> = keys
                .iter()
                .map(|(key, n)| format!("{{\"key\":{},\"count\":{n}}}", json_string(&String::from_utf8_lossy(key))))
                .collect();
            format!("{}:[{}]", json_string(ranking.name()), keys.join(","))
        })
        .collect();
    format!("{{{}}}", rankings.join(","))
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            // Also `<`, `>`, `&` and the line separators, so the text is
            // inert wherever it is pasted.
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a\"b\\c\n<x>&\u{1}"), "\"a\\\"b\\\\c\\u000a\\u003cx\\u003e\\u0026\\u0001\"");
        assert_eq!(json_string("plain key:1"), "\"plain key:1\"");
    }

    #[test]
    fn routes_answer_the_page_the_metrics_and_refuse_the_rest() {
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder().handle();
        let history = History::default();
        history.add(7, "x 1\n");
        let get = |head: &str| route(head.as_bytes(), &handle, &history);
        let (status, kind, body) = get("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!((status, kind), ("200 OK", "text/html; charset=utf-8"));
        assert!(body.contains("<canvas") && body.contains("fetch(\"/metrics\""), "the page polls /metrics");
        assert!(!body.contains("src=\"http") && !body.contains("href=\"http"), "no external assets");
        assert_eq!(get("GET /metrics?x=1 HTTP/1.1\r\n\r\n").0, "200 OK");
        let (_, _, text) = get("GET /history HTTP/1.1\r\n\r\n");
        assert!(text.starts_with("# t 7\nx 1\n# now "), "{text}");
        assert!(get("GET /top HTTP/1.1\r\n\r\n").2.starts_with("{\"denials\":["));
        assert_eq!(get("GET /nothing HTTP/1.1\r\n\r\n").0, "404 Not Found");
        assert_eq!(get("POST /metrics HTTP/1.1\r\n\r\n").0, "405 Method Not Allowed");
        assert_eq!(get("\r\n\r\n").0, "405 Method Not Allowed");
    }

    #[test]
    fn history_keeps_samples_only_and_forgets_the_oldest() {
        let h = History::default();
        let keep = (HISTORY.as_millis() / SAMPLE_EVERY.as_millis()) as usize;
        for i in 0..keep + 3 {
            h.add(i as u64, &format!("# HELP x a metric\n# TYPE x gauge\nx {i}\n"));
        }
        let text = h.render(99);
        assert!(!text.contains("HELP") && !text.contains("TYPE"), "{}", &text[..200]);
        assert_eq!(text.matches("# t ").count(), keep);
        assert!(text.starts_with("# t 3\nx 3\n"), "the oldest three are gone: {}", &text[..40]);
        assert!(text.ends_with(&format!("# t {}\nx {}\n# now 99\n", keep + 2, keep + 2)));
    }
}
