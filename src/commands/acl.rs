//! ACL rules as Redis 7 has them, selectors included: `ACL SETUSER` rules,
//! categories, the description `ACL LIST`/`GETUSER` give, and the check of
//! a command, its keys and its channels against a user. The users
//! themselves are replicated state ([`crate::keyspace::acl`]); changes are
//! log entries ([`AclOp`]), so every node enforces the same rules, scripts
//! included (they run on every node with their caller's permissions).

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::table::{lookup, CommandSpec, COMMANDS};
use crate::keyspace::acl::{AclTable, Selector, User, KEY_READ, KEY_WRITE};
use crate::keyspace::{glob_match, Keyspace};
use crate::protocol::Reply;

/// Redis 7's categories, and `lock` for `LOCK.*`.
pub const CATEGORIES: &[&str] = &[
    "keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap", "hyperloglog", "geo",
    "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous", "connection", "transaction", "scripting",
    "lock",
];

/// `ACL`'s subcommands, whose categories differ.
const ACL_SUBCOMMANDS: &[&str] =
    &["setuser", "getuser", "deluser", "list", "users", "whoami", "cat", "genpass", "dryrun", "load", "save", "help"];
/// `CLIENT`'s.
const CLIENT_SUBCOMMANDS: &[&str] = &[
    "id", "setname", "getname", "setinfo", "info", "list", "kill", "pause", "unpause", "unblock", "no-evict", "no-touch",
    "reply", "tracking", "caching", "getredir", "trackinginfo", "help",
];

fn subcommands_with_own_categories(name: &str) -> Option<&'static [&'static str]> {
    match name {
        "acl" => Some(ACL_SUBCOMMANDS),
        "client" => Some(CLIENT_SUBCOMMANDS),
        _ => None,
    }
}

/// Write commands that also return what the key held (or a value made from
/// it): they need read access to their keys as well, as Redis's key specs
/// say (`ACCESS`). For commands that move data between keys this is about
/// the first key, the source.
fn reads_while_writing(spec: &CommandSpec, argv: &[Bytes]) -> bool {
    match spec.name {
        "getdel" | "getset" | "getex" | "lpop" | "rpop" | "blpop" | "brpop" | "lmpop" | "blmpop" | "lmove" | "blmove"
        | "rpoplpush" | "brpoplpush" | "incr" | "incrby" | "decr" | "decrby" | "incrbyfloat" | "hincrby"
        | "hincrbyfloat" | "setbit" | "spop" | "smove" | "zincrby" | "append" | "zadd" | "zpopmin" | "zpopmax"
        | "bzpopmin" | "bzpopmax" | "zmpop" | "bzmpop" | "rename" | "renamenx" => true,
        "set" => argv.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"get")),
        _ => false,
    }
}

/// The access each key of `argv` needs (`KEY_READ`, `KEY_WRITE`), as
/// Redis's key specs give it: a read command reads its keys; a write command
/// writes them (and reads those whose data it returns), except that a `STORE`
/// command only reads its sources and `COPY` only reads its source; a script
/// may do either with the keys it declares.
pub fn key_access<'a>(spec: &CommandSpec, argv: &'a [Bytes]) -> Vec<(&'a Bytes, u8)> {
    let keys = command_keys(spec, argv);
    if spec.name == "eval_ro" || spec.name == "evalsha_ro" || !spec.is_write() {
        return keys.into_iter().map(|k| (k, KEY_READ)).collect();
    }
    if spec.name.starts_with("eval") {
        return keys.into_iter().map(|k| (k, KEY_READ | KEY_WRITE)).collect();
    }
    let first = KEY_WRITE | if reads_while_writing(spec, argv) { KEY_READ } else { 0 };
    let rest = match spec.name {
        "sinterstore" | "sunionstore" | "sdiffstore" | "zinterstore" | "zunionstore" | "zdiffstore" | "zrangestore" => KEY_READ,
        "lmove" | "blmove" | "rpoplpush" | "brpoplpush" | "smove" | "rename" | "renamenx" => KEY_WRITE,
        _ => first,
    };
    let (first, rest) = if matches!(spec.name, "copy" | "sort") { (KEY_READ, KEY_WRITE) } else { (first, rest) };
    keys.into_iter().enumerate().map(|(i, k)| (k, if i == 0 { first } else { rest })).collect()
}

/// Commands with subcommands: permissions may name `command|subcommand`.
const CONTAINERS: &[&str] = &[
    "acl", "client", "config", "command", "script", "pubsub", "object", "memory", "slowlog", "module", "function", "latency",
    "xgroup", "xinfo", "raft.node",
];

/// Whether rules may name `name|subcommand`.
pub(crate) fn is_container(name: &str) -> bool {
    CONTAINERS.contains(&name)
}

/// The categories of a command (of one subcommand, for `ACL`).
pub fn categories(spec: &CommandSpec, sub: Option<&str>) -> Vec<&'static str> {
    let mut cats = Vec::new();
    let flag = |f: &str| spec.flags.contains(&f);
    // LOCK.TOP names any key: for operators, not for a user held to some.
    if spec.name.starts_with("lock.") && !flag("admin") {
        cats.push("lock");
    } else {
        match spec.group {
            "string" => cats.push("string"),
            "hash" => cats.push("hash"),
            "list" => cats.push("list"),
            "sorted-set" => cats.push("sortedset"),
            "set" => cats.push("set"),
            "bitmap" => cats.push("bitmap"),
            "hyperloglog" => cats.push("hyperloglog"),
            "geo" => cats.push("geo"),
            "stream" => cats.push("stream"),
            "generic" => cats.push("keyspace"),
            "pubsub" => cats.push("pubsub"),
            "scripting" => cats.push("scripting"),
            "transactions" => cats.push("transaction"),
            "connection" => cats.push("connection"),
            _ => {}
        }
    }
    if flag("readonly") && !spec.name.starts_with("eval") {
        cats.push("read");
    }
    if flag("write") {
        cats.push("write");
    }
    cats.push(if flag("fast") { "fast" } else { "slow" });
    if flag("blocking") {
        cats.push("blocking");
    }
    let dangerous = match spec.name {
        "flushall" | "flushdb" => {
            cats.push("keyspace");
            true
        }
        "keys" | "info" => true,
        "acl" => !matches!(sub, Some("whoami" | "cat" | "genpass" | "help")),
        // Another client's address, name and user, or power over them.
        "client" => matches!(sub, Some("list" | "kill" | "pause" | "unpause" | "unblock" | "no-evict" | "no-touch")),
        _ => flag("admin"),
    };
    if dangerous {
        if flag("admin") || matches!(spec.name, "acl" | "client") {
            cats.push("admin");
        }
        cats.push("dangerous");
    }
    cats
}

/// The subcommand `argv` names, for a container command.
fn subcommand(spec: &CommandSpec, argv: &[Bytes]) -> Option<String> {
    if CONTAINERS.contains(&spec.name) {
        argv.get(1).map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
    } else {
        None
    }
}

/// Why a command was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// The command (`name` or `name|sub`).
    Command(String),
    Key,
    Channel,
    /// `SORT ... BY pattern` or `GET pattern` by a user who may not read
    /// every key: the command's own error, not an ACL failure (`ACL DRYRUN`
    /// allows the command, as Redis's does).
    Option(String),
}

impl Denied {
    /// What Redis 7 answers a client.
    pub fn reply(&self) -> Reply {
        Reply::Error(match self {
            Denied::Command(name) => format!("NOPERM this user has no permissions to run the '{name}' command"),
            Denied::Key => "NOPERM this user has no permissions to access one of the keys used as arguments".into(),
            Denied::Channel => {
                "NOPERM this user has no permissions to access one of the channels used as arguments".into()
            }
            Denied::Option(error) => error.clone(),
        })
    }

    /// What Redis 7 raises in a script that calls it.
    pub fn script_reply(&self) -> Reply {
        let why = match self {
            Denied::Command(_) => "can't run this command or subcommand",
            Denied::Key => "can't access at least one of the keys mentioned in the command arguments",
            Denied::Channel => "can't publish to the channel mentioned in the command",
            Denied::Option(error) => return Reply::Error(error.clone()),
        };
        Reply::Error(format!("ERR The user executing the script {why}"))
    }
}

/// A user's rules, worked out for checking commands quickly: its own and
/// each of its selectors'.
#[derive(Debug, Clone)]
pub struct Perms {
    unrestricted: bool,
    root: SelectorPerms,
    selectors: Vec<SelectorPerms>,
}

/// One selector's rules, worked out.
#[derive(Debug, Clone)]
struct SelectorPerms {
    rules: Selector,
    commands: HashSet<&'static str>,
    allowed_subs: HashSet<String>,
    denied_subs: HashSet<String>,
}

impl Perms {
    pub fn compile(user: &User) -> Perms {
        Perms {
            unrestricted: user.unrestricted(),
            root: SelectorPerms::compile(user.root()),
            selectors: user.selectors.iter().cloned().map(SelectorPerms::compile).collect(),
        }
    }

    /// Everything is allowed: no check needed.
    pub fn unrestricted(&self) -> bool {
        self.unrestricted
    }

    /// Whether the user may run `argv` (already resolved to `spec`).
    pub fn check(&self, spec: &CommandSpec, argv: &[Bytes]) -> Result<(), Denied> {
        self.check_naming(spec, argv).map_err(|(denied, _)| denied)
    }

    /// [`Perms::check`], and with a refusal what it was about, for `ACL
    /// LOG`: the command (`name` or `name|sub`), the key or the channel.
    /// The user's own rules or any one selector must allow all of the
    /// command; refused by all, the refusal is the one that got furthest
    /// (a channel over a key over the command), as Redis reports it.
    pub fn check_naming(&self, spec: &CommandSpec, argv: &[Bytes]) -> Result<(), (Denied, Bytes)> {
        if self.unrestricted {
            return Ok(());
        }
        let sub = subcommand(spec, argv);
        // A subcommand that does not exist is answered as such before any
        // permission is looked at, as Redis does (redis-py 8 sends `CLIENT
        // MAINT_NOTIFICATIONS` on connecting, which Redis 7 does not know:
        // a refusal here wrote an `ACL LOG` entry for every connection).
        if let (Some(sub), Some(known)) = (&sub, subcommands_with_own_categories(spec.name)) {
            if !known.contains(&sub.as_str()) {
                return Ok(());
            }
        }
        let rank = |d: &Denied| match d {
            Denied::Command(_) => 1,
            Denied::Key | Denied::Option(_) => 2,
            Denied::Channel => 3,
        };
        // Of equal rank, the refusal at the later argument, as Redis picks.
        let mut refusal: Option<(Denied, Bytes, usize)> = None;
        for selector in std::iter::once(&self.root).chain(&self.selectors) {
            match selector.check(spec, argv, sub.as_deref()) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    if refusal.as_ref().is_none_or(|r| (rank(&e.0), e.2) > (rank(&r.0), r.2)) {
                        refusal = Some(e);
                    }
                }
            }
        }
        let (denied, object, _) = refusal.expect("the root selector refused");
        Err((denied, object))
    }
}

impl SelectorPerms {
    fn compile(rules: Selector) -> SelectorPerms {
        let mut p = SelectorPerms {
            commands: if rules.all_commands { COMMANDS.iter().map(|c| c.name).collect() } else { HashSet::new() },
            allowed_subs: HashSet::new(),
            denied_subs: HashSet::new(),
            rules,
        };
        for rule in p.rules.command_rules.clone() {
            p.apply(&rule);
        }
        p
    }

    fn apply(&mut self, rule: &str) {
        let add = rule.starts_with('+');
        let Some(what) = rule.strip_prefix('+').or_else(|| rule.strip_prefix('-')) else { return };
        if let Some(cat) = what.strip_prefix('@') {
            for spec in COMMANDS {
                if let Some(subs) = subcommands_with_own_categories(spec.name).filter(|_| cat != "all") {
                    // Their subcommands differ: ACL WHOAMI is not @dangerous,
                    // CLIENT LIST is.
                    for sub in subs {
                        if categories(spec, Some(sub)).contains(&cat) {
                            self.set_sub(format!("{}|{sub}", spec.name), add);
                        }
                    }
                } else if cat == "all" || categories(spec, None).contains(&cat) {
                    self.set(spec.name, add);
                }
            }
        } else if let Some((name, sub)) = what.split_once('|') {
            self.set_sub(format!("{name}|{sub}"), add);
        } else if let Some(spec) = lookup(what.as_bytes()) {
            self.set(spec.name, add);
        }
    }

    fn set_sub(&mut self, full: String, add: bool) {
        if add {
            self.denied_subs.remove(&full);
            self.allowed_subs.insert(full);
        } else {
            self.allowed_subs.remove(&full);
            self.denied_subs.insert(full);
        }
    }

    fn set(&mut self, name: &'static str, add: bool) {
        let prefix = format!("{name}|");
        self.allowed_subs.retain(|s| !s.starts_with(&prefix));
        self.denied_subs.retain(|s| !s.starts_with(&prefix));
        if add {
            self.commands.insert(name);
        } else {
            self.commands.remove(name);
        }
    }

    /// Whether these rules may read any key: every key, or the pattern `*`
    /// with read access (Redis's unrestricted key access).
    fn reads_every_key(&self) -> bool {
        self.rules.all_keys
            || self.rules.key_patterns.iter().any(|(access, p)| access & KEY_READ != 0 && &p[..] == b"*")
    }

    /// A refusal names what was refused and the argument it is at (0 for
    /// the command).
    fn check(&self, spec: &CommandSpec, argv: &[Bytes], sub: Option<&str>) -> Result<(), (Denied, Bytes, usize)> {
        let at = |arg: &Bytes| argv.iter().position(|a| std::ptr::eq(a, arg)).unwrap_or(0);
        let allowed = match sub {
            Some(sub) => {
                let full = format!("{}|{sub}", spec.name);
                self.allowed_subs.contains(&full) || (self.commands.contains(spec.name) && !self.denied_subs.contains(&full))
            }
            None => self.commands.contains(spec.name),
        };
        if !allowed {
            let name = match sub {
                Some(sub) => format!("{}|{sub}", spec.name),
                None => spec.name.to_string(),
            };
            return Err((Denied::Command(name.clone()), Bytes::from(name), 0));
        }
        if !self.rules.all_keys {
            for (key, need) in key_access(spec, argv) {
                let ok = self.rules.key_patterns.iter().any(|(access, p)| access & need == need && glob_match(p, key));
                if !ok {
                    return Err((Denied::Key, key.clone(), at(key)));
                }
            }
        }
        if matches!(spec.name, "sort" | "sort_ro") && !self.reads_every_key() {
            if let Some(refused) = super::sort::refused_without_full_key_access(argv) {
                return Err((Denied::Option(refused.to_string()), Bytes::from_static(b"sort"), 0));
            }
        }
        if !self.rules.all_channels {
            let (channels, literal): (&[Bytes], bool) = match spec.name {
                "publish" | "spublish" => (&argv[1..2.min(argv.len())], false),
                "subscribe" | "ssubscribe" => (&argv[1..], false),
                "psubscribe" => (&argv[1..], true),
                _ => (&[], false),
            };
            for ch in channels {
                let ok = self
                    .rules
                    .channel_patterns
                    .iter()
                    .any(|p| if literal { p == ch } else { glob_match(p, ch) });
                if !ok {
                    return Err((Denied::Channel, ch.clone(), at(ch)));
                }
            }
        }
        Ok(())
    }
}

/// The key arguments of `argv` (see [`CommandSpec::keys`]).
pub fn command_keys<'a>(spec: &CommandSpec, argv: &'a [Bytes]) -> Vec<&'a Bytes> {
    spec.keys(argv).collect()
}

/// The user `name` as the table has it; `default` is the built-in one
/// (every permission, no password) until the log defines it. `None`: no
/// such user.
pub fn user<'a>(table: &'a AclTable, name: &str) -> Option<std::borrow::Cow<'a, User>> {
    match table.users.get(name) {
        Some(u) => Some(std::borrow::Cow::Borrowed(u)),
        None if name == "default" => Some(std::borrow::Cow::Owned(default_user())),
        None => None,
    }
}

/// `user default on nopass ~* &* +@all`.
pub fn default_user() -> User {
    User { enabled: true, nopass: true, all_commands: true, all_keys: true, all_channels: true, ..User::new() }
}

/// SHA-256 of a password, lower-case hex, as Redis stores and shows it.
pub fn hash_password(password: &[u8]) -> String {
    Sha256::digest(password).iter().map(|b| format!("{b:02x}")).collect()
}

const SYNTAX: &str = "Syntax error";

/// Applies one `ACL SETUSER` rule to `u`; the error is Redis's text. A
/// selector is one rule, `(` to `)` (see [`merge_selector_args`]).
pub fn apply_rule(u: &mut User, rule: &[u8]) -> Result<(), &'static str> {
    // Passwords may be any bytes.
    match rule.first() {
        None => return Err(SYNTAX),
        Some(b'>') => {
            u.passwords.insert(hash_password(&rule[1..]));
            u.nopass = false;
            return Ok(());
        }
        Some(b'<') => {
            return if u.passwords.remove(&hash_password(&rule[1..])) {
                Ok(())
            } else {
                Err("The password you are trying to remove from the user does not exist")
            };
        }
        Some(b'(') => {
            let inner = rule.strip_suffix(b")").ok_or(SYNTAX)?;
            let mut selector = Selector::default();
            for word in inner[1..].split(|c| c.is_ascii_whitespace()).filter(|w| !w.is_empty()) {
                apply_permission(&mut selector, word)?;
            }
            u.selectors.push(selector);
            return Ok(());
        }
        _ => {}
    }
    let text = std::str::from_utf8(rule).map_err(|_| SYNTAX)?;
    match text.to_ascii_lowercase().as_str() {
        "on" => u.enabled = true,
        "off" => u.enabled = false,
        "nopass" => {
            u.nopass = true;
            u.passwords.clear();
        }
        "resetpass" => {
            u.nopass = false;
            u.passwords.clear();
        }
        "reset" => *u = User::new(),
        "clearselectors" => u.selectors.clear(),
        "sanitize-payload" | "skip-sanitize-payload" => {}
        _ if rule[0] == b'#' || rule[0] == b'!' => {
            let hash = &text[1..];
            if hash.len() != 64 || !hash.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
                return Err("The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters");
            }
            if text.starts_with('#') {
                u.passwords.insert(hash.to_string());
                u.nopass = false;
            } else if !u.passwords.remove(hash) {
                return Err("The password you are trying to remove from the user does not exist");
            }
        }
        _ => {
            let mut root = u.take_root();
            let applied = apply_permission(&mut root, rule);
            u.set_root(root);
            applied?;
        }
    }
    Ok(())
}

/// Applies a rule about commands, keys or channels to a user's own
/// permissions or to one selector.
fn apply_permission(s: &mut Selector, rule: &[u8]) -> Result<(), &'static str> {
    const UNKNOWN: &str = "Unknown command or category name in ACL";
    // Patterns are written to the ACL file one word each.
    if matches!(rule.first(), Some(b'~' | b'%' | b'&')) && rule.iter().any(|c| c.is_ascii_whitespace() || *c == 0) {
        return Err(SYNTAX);
    }
    let text = std::str::from_utf8(rule).map_err(|_| SYNTAX)?;
    let lower = text.to_ascii_lowercase();
    match lower.as_str() {
        "allkeys" => {
            s.all_keys = true;
            s.key_patterns.clear();
        }
        "resetkeys" => {
            s.all_keys = false;
            s.key_patterns.clear();
        }
        "allchannels" => {
            s.all_channels = true;
            s.channel_patterns.clear();
        }
        "resetchannels" => {
            s.all_channels = false;
            s.channel_patterns.clear();
        }
        "allcommands" | "+@all" => {
            s.all_commands = true;
            s.command_rules.clear();
        }
        "nocommands" | "-@all" => {
            s.all_commands = false;
            s.command_rules.clear();
        }
        _ => match rule.first() {
            Some(b'~' | b'%') => {
                let (access, pattern) = if text.starts_with('~') {
                    (KEY_READ | KEY_WRITE, &rule[1..])
                } else {
                    let tilde = text.find('~').ok_or(SYNTAX)?;
                    let mut access = 0;
                    for c in lower[1..tilde].chars() {
                        access |= match c {
                            'r' => KEY_READ,
                            'w' => KEY_WRITE,
                            _ => return Err(SYNTAX),
                        };
                    }
                    if access == 0 {
                        return Err(SYNTAX);
                    }
                    (access, &rule[tilde + 1..])
                };
                if s.all_keys {
                    return Err("Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns");
                }
                if pattern == b"*" && access == KEY_READ | KEY_WRITE {
                    s.all_keys = true;
                    s.key_patterns.clear();
                } else {
                    s.key_patterns.push((access, Bytes::copy_from_slice(pattern)));
                }
            }
            Some(b'&') => {
                if s.all_channels {
                    return Err("Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels");
                }
                if &rule[1..] == b"*" {
                    s.all_channels = true;
                    s.channel_patterns.clear();
                } else {
                    s.channel_patterns.push(Bytes::copy_from_slice(&rule[1..]));
                }
            }
            Some(b'+' | b'-') => {
                let what = &lower[1..];
                let known = if let Some(cat) = what.strip_prefix('@') {
                    CATEGORIES.contains(&cat)
                } else if let Some((name, sub)) = what.split_once('|') {
                    if text.starts_with('+') && sub.is_empty() {
                        return Err(SYNTAX);
                    }
                    lookup(name.as_bytes()).is_some_and(|s| is_container(s.name)) && !sub.contains('|')
                } else {
                    lookup(what.as_bytes()).is_some()
                };
                if !known {
                    return Err(UNKNOWN);
                }
                let canonical = match what.strip_prefix('@') {
                    Some(_) => lower.clone(),
                    None => format!("{}{}", &lower[..1], what),
                };
                s.command_rules.push(canonical);
            }
            _ => return Err(SYNTAX),
        },
    }
    Ok(())
}

/// Joins the arguments of one selector that were given apart (`(+get`,
/// `~app:*)`, as an ACL file's words come) into one rule, as Redis does
/// before it applies any; the error is Redis's, for a `(` never closed.
pub fn merge_selector_args(args: &[Bytes]) -> Result<Vec<Bytes>, String> {
    let mut out = Vec::with_capacity(args.len());
    let mut open: Option<Vec<u8>> = None;
    for arg in args {
        match &mut open {
            Some(selector) => {
                selector.push(b' ');
                selector.extend_from_slice(arg);
                if arg.ends_with(b")") {
                    out.push(Bytes::from(open.take().unwrap_or_default()));
                }
            }
            None if arg.starts_with(b"(") && !arg.ends_with(b")") => open = Some(arg.to_vec()),
            None => out.push(arg.clone()),
        }
    }
    match open {
        Some(selector) => Err(format!(
            "Unmatched parenthesis in acl selector starting at '{}'.",
            String::from_utf8_lossy(&selector)
        )),
        None => Ok(out),
    }
}

/// How a user reads in `ACL LIST` (and an ACL file), after `user <name> `.
pub fn describe(u: &User) -> String {
    let mut out = Vec::new();
    out.push(if u.enabled { "on" } else { "off" }.to_string());
    if u.nopass {
        out.push("nopass".into());
    }
    out.push("sanitize-payload".into());
    out.extend(u.passwords.iter().map(|h| format!("#{h}")));
    out.push(describe_selector(&u.root()));
    out.extend(u.selectors.iter().map(|s| format!("({})", describe_selector(s))));
    out.join(" ")
}

/// Keys, channels, then commands, as Redis writes a selector.
fn describe_selector(s: &Selector) -> String {
    let mut out = Vec::new();
    if s.all_keys {
        out.push("~*".into());
    } else {
        out.extend(s.key_patterns.iter().map(|(a, p)| key_pattern(*a, p)));
    }
    if s.all_channels {
        out.push("&*".into());
    } else {
        out.push("resetchannels".into());
        out.extend(s.channel_patterns.iter().map(|p| format!("&{}", String::from_utf8_lossy(p))));
    }
    out.push(command_description(s));
    out.join(" ")
}

fn key_pattern(access: u8, pattern: &[u8]) -> String {
    let prefix = match access {
        KEY_READ => "%R~",
        KEY_WRITE => "%W~",
        _ => "~",
    };
    format!("{prefix}{}", String::from_utf8_lossy(pattern))
}

/// `+@all` or `-@all`, then the rules since.
pub fn command_description(s: &Selector) -> String {
    let mut out = vec![if s.all_commands { "+@all" } else { "-@all" }.to_string()];
    out.extend(s.command_rules.iter().cloned());
    out.join(" ")
}

/// `ACL GETUSER`'s map.
pub fn getuser_reply(u: &User) -> Reply {
    let text = |s: &str| Reply::text(s);
    let mut flags = vec![text(if u.enabled { "on" } else { "off" })];
    if u.nopass {
        flags.push(text("nopass"));
    }
    flags.push(text("sanitize-payload"));
    let mut fields = vec![
        (text("flags"), Reply::Set(flags)),
        (text("passwords"), Reply::Array(u.passwords.iter().map(|h| text(h)).collect())),
    ];
    fields.extend(selector_fields(&u.root()));
    fields.push((text("selectors"), Reply::Array(u.selectors.iter().map(|s| Reply::Map(selector_fields(s))).collect())));
    Reply::Map(fields)
}

/// `commands`, `keys`, `channels` of `ACL GETUSER` (the user's own, and
/// each selector's).
fn selector_fields(s: &Selector) -> Vec<(Reply, Reply)> {
    let keys = if s.all_keys {
        "~*".to_string()
    } else {
        s.key_patterns.iter().map(|(a, p)| key_pattern(*a, p)).collect::<Vec<_>>().join(" ")
    };
    let channels = if s.all_channels {
        "&*".to_string()
    } else {
        s.channel_patterns.iter().map(|p| format!("&{}", String::from_utf8_lossy(p))).collect::<Vec<_>>().join(" ")
    };
    vec![
        (Reply::text("commands"), Reply::bulk(command_description(s))),
        (Reply::text("keys"), Reply::bulk(keys)),
        (Reply::text("channels"), Reply::bulk(channels)),
    ]
}

/// An ACL change, as a log entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AclOp {
    /// `ACL SETUSER name rule ...`: creates the user if needed, then applies
    /// the rules in order; any invalid rule leaves the user as it was. For
    /// `default` not yet defined through the log, `base` (the built-in
    /// default as the proposing node has it) is where the rules start.
    SetUser { name: String, rules: Vec<Bytes>, base: Vec<Bytes> },
    /// `ACL DELUSER name ...`.
    DelUser { names: Vec<String> },
    /// `ACL LOAD`: the whole table, from the file the node read.
    Load { users: Vec<(String, Vec<Bytes>)> },
    /// `--aclfile` at start: like `Load`, only if there are no users yet
    /// when it is applied.
    LoadIfEmpty { users: Vec<(String, Vec<Bytes>)> },
}

/// Builds a user from rules (an ACL file line, `ACL LOAD`).
pub fn user_from_rules(rules: &[Bytes]) -> Result<User, String> {
    let mut u = User::new();
    for rule in &merge_selector_args(rules)? {
        apply_rule(&mut u, rule)
            .map_err(|e| format!("Error in ACL SETUSER modifier '{}': {e}", String::from_utf8_lossy(rule)))?;
    }
    Ok(u)
}

/// Applies an ACL change to the keyspace (every node, in log order).
pub fn apply_op(ks: &mut Keyspace, op: &AclOp) -> Reply {
    match op {
        AclOp::SetUser { name, rules, base } => {
            let mut u = match ks.acl().users.get(name) {
                Some(u) => u.clone(),
                None if name == "default" && !base.is_empty() => match user_from_rules(base) {
                    Ok(u) => u,
                    Err(e) => return Reply::Error(format!("ERR {e}")),
                },
                None => user(ks.acl(), name).map(|u| u.into_owned()).unwrap_or_default(),
            };
            for rule in rules {
                if let Err(e) = apply_rule(&mut u, rule) {
                    return Reply::Error(format!(
                        "ERR Error in ACL SETUSER modifier '{}': {e}",
                        String::from_utf8_lossy(rule)
                    ));
                }
            }
            ks.acl_mut().users.insert(name.clone(), u);
            Reply::ok()
        }
        AclOp::DelUser { names } => {
            if names.iter().any(|n| n == "default") {
                return Reply::error("ERR The 'default' user cannot be removed");
            }
            let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
            let removed = distinct.iter().filter(|n| ks.acl().users.contains_key(n.as_str())).count();
            if removed > 0 {
                let table = ks.acl_mut();
                for n in names {
                    table.users.remove(n);
                }
            }
            Reply::Int(removed as i64)
        }
        AclOp::LoadIfEmpty { users } => {
            if !ks.acl().users.is_empty() {
                return Reply::error("ERR the cluster already has ACL users: ACL LOAD replaces them");
            }
            apply_op(ks, &AclOp::Load { users: users.clone() })
        }
        AclOp::Load { users } => {
            let mut table = AclTable::default();
            for (name, rules) in users {
                match user_from_rules(rules) {
                    Ok(u) => {
                        table.users.insert(name.clone(), u);
                    }
                    Err(e) => return Reply::Error(format!("ERR /user {name}: {e}")),
                }
            }
            *ks.acl_mut() = table;
            Reply::ok()
        }
    }
}

/// Parses an ACL file (Redis's format: `user <name> <rule> ...` per line,
/// `#` comments): the users and their rules, or the first error.
pub fn parse_acl_file(text: &str) -> Result<Vec<(String, Vec<Bytes>)>, String> {
    let mut users: Vec<(String, Vec<Bytes>)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        if words.next() != Some("user") {
            return Err(format!("line {}: should start with user keyword", i + 1));
        }
        let name = words.next().ok_or_else(|| format!("line {}: a user needs a name", i + 1))?.to_string();
        if users.iter().any(|(n, _)| *n == name) {
            return Err(format!(
                "line {}: Duplicate user found. A user can only be defined once in config files",
                i + 1
            ));
        }
        let words: Vec<Bytes> = words.map(|w| Bytes::copy_from_slice(w.as_bytes())).collect();
        let rules = merge_selector_args(&words).map_err(|e| format!("line {}: {e}", i + 1))?;
        user_from_rules(&rules).map_err(|e| format!("line {}: {e}", i + 1))?;
        users.push((name, rules));
    }
    Ok(users)
}

/// The ACL file text for `table` (`ACL SAVE`); the built-in default user
/// is written too, so the file is complete.
pub fn acl_file(table: &AclTable) -> String {
    let mut out = String::new();
    if !table.users.contains_key("default") {
        out.push_str(&format!("user default {}\n", describe(&default_user())));
    }
    for (name, u) in &table.users {
        out.push_str(&format!("user {name} {}\n", describe(u)));
    }
    out
}

thread_local! {
    /// The permissions of the user whose request is being applied or read
    /// here (set for the duration of it), which scripts it runs obey.
    static SCRIPT_USER: RefCell<Option<Arc<Perms>>> = const { RefCell::new(None) };
}

/// Runs `f` with scripts limited to `perms` (none: unlimited).
pub fn with_user<T>(perms: Option<Arc<Perms>>, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Arc<Perms>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            SCRIPT_USER.with(|u| *u.borrow_mut() = previous);
        }
    }
    let previous = SCRIPT_USER.with(|u| std::mem::replace(&mut *u.borrow_mut(), perms));
    let _restore = Restore(previous);
    f()
}

/// Whether the script running now may call `argv` (resolved to `spec`).
pub fn script_check(spec: &CommandSpec, argv: &[Bytes]) -> Result<(), Reply> {
    SCRIPT_USER.with(|u| match &*u.borrow() {
        Some(perms) => perms.check(spec, argv).map_err(|d| d.script_reply()),
        None => Ok(()),
    })
}

/// The permissions of user `name` in `ks` (a user that no longer exists
/// may do nothing). Every command of a user with limits is applied as that
/// user on every node, so the compiled rules are kept per ACL table: an
/// entry holds its table, so that table is never changed in place while
/// cached (a change makes the keyspace copy it) and its address is never
/// another table's.
pub fn perms_of(ks: &Keyspace, name: &str) -> Arc<Perms> {
    type Compiled = Vec<(Arc<AclTable>, std::collections::HashMap<String, Arc<Perms>>)>;
    /// Tables kept: a node's current one, one per node of a test process.
    const TABLES: usize = 8;
    /// Users kept per table.
    const USERS: usize = 1024;
    static COMPILED: std::sync::Mutex<Compiled> = std::sync::Mutex::new(Vec::new());
    let table = ks.acl();
    let mut compiled = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(perms) = compiled.iter().find(|(t, _)| Arc::ptr_eq(t, table)).and_then(|(_, users)| users.get(name)) {
        return perms.clone();
    }
    let u = user(table, name).map(|u| u.into_owned()).unwrap_or_default();
    let perms = Arc::new(Perms::compile(&u));
    let at = match compiled.iter().position(|(t, _)| Arc::ptr_eq(t, table)) {
        Some(at) => at,
        None => {
            if compiled.len() == TABLES {
                compiled.remove(0);
            }
            compiled.push((table.clone(), Default::default()));
            compiled.len() - 1
        }
    };
    let users = &mut compiled[at].1;
    if users.len() == USERS {
        users.clear();
    }
    users.insert(name.to_string(), perms.clone());
    perms
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Vec<Bytes> {
        s.split_whitespace().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    fn user_with(rules: &str) -> Perms {
        Perms::compile(&user_from_rules(&b(rules)).unwrap())
    }

    fn check(p: &Perms, cmd: &str) -> Result<(), Denied> {
        let argv = b(cmd);
        p.check(lookup(&argv[0]).unwrap(), &argv)
    }

    #[test]
    fn compiled_rules_follow_every_change_of_the_table() {
        let mut ks = Keyspace::new();
        ks.acl_mut().users.insert("u".into(), user_from_rules(&b("on +get ~*")).unwrap());
        let get = b("GET k");
        let set = b("SET k v");
        let first = perms_of(&ks, "u");
        assert!(first.check(lookup(b"get").unwrap(), &get).is_ok());
        assert!(first.check(lookup(b"set").unwrap(), &set).is_err());
        assert!(Arc::ptr_eq(&first, &perms_of(&ks, "u")), "compiled once per table");
        // Changed in place as far as the keyspace knows: the rules follow.
        ks.acl_mut().users.insert("u".into(), user_from_rules(&b("on +set ~*")).unwrap());
        let second = perms_of(&ks, "u");
        assert!(second.check(lookup(b"get").unwrap(), &get).is_err());
        assert!(second.check(lookup(b"set").unwrap(), &set).is_ok());
        ks.acl_mut().users.remove("u");
        assert!(perms_of(&ks, "u").check(lookup(b"set").unwrap(), &set).is_err(), "a deleted user may do nothing");
    }

    #[test]
    fn a_lock_user_locks_its_keys_only() {
        let p = user_with("on >pw +@lock ~orders:*");
        assert_eq!(check(&p, "LOCK.ACQUIRE orders:1 me 1000"), Ok(()));
        assert_eq!(check(&p, "LOCK.ACQUIRE locks:1 me 1000"), Err(Denied::Key));
        assert_eq!(check(&p, "FLUSHALL"), Err(Denied::Command("flushall".into())));
        assert_eq!(check(&p, "KEYS *"), Err(Denied::Command("keys".into())));
        assert_eq!(check(&p, "GET orders:1"), Err(Denied::Command("get".into())));
    }

    #[test]
    fn rules_apply_in_order_with_subcommands() {
        let p = user_with("+@all -@dangerous ~*");
        assert_eq!(check(&p, "GET k"), Ok(()));
        assert_eq!(check(&p, "FLUSHALL"), Err(Denied::Command("flushall".into())));
        assert_eq!(check(&p, "ACL WHOAMI"), Ok(()));
        assert_eq!(check(&p, "ACL SETUSER x"), Err(Denied::Command("acl|setuser".into())));
        let p = user_with("-@all +client|id +acl -acl|setuser");
        assert_eq!(check(&p, "CLIENT ID"), Ok(()));
        assert_eq!(check(&p, "CLIENT LIST"), Err(Denied::Command("client|list".into())));
        assert_eq!(check(&p, "ACL LIST"), Ok(()));
        assert_eq!(check(&p, "ACL SETUSER x"), Err(Denied::Command("acl|setuser".into())));
        // A subcommand that does not exist is left to its command, which
        // answers that it does not exist (no ACL refusal, no ACL LOG entry).
        let p = user_with("-@all +get ~*");
        assert_eq!(check(&p, "CLIENT MAINT_NOTIFICATIONS on"), Ok(()));
        assert_eq!(check(&p, "ACL NOSUCH"), Ok(()));
        assert_eq!(check(&p, "CLIENT ID"), Err(Denied::Command("client|id".into())));
        assert_eq!(check(&p, "CLIENT SETINFO lib-name x"), Err(Denied::Command("client|setinfo".into())));
    }

    #[test]
    fn read_and_write_key_patterns_and_channels() {
        let p = user_with("+@all %R~r:* %W~w:* &news.* ");
        assert_eq!(check(&p, "GET r:1"), Ok(()));
        assert_eq!(check(&p, "SET r:1 v"), Err(Denied::Key));
        assert_eq!(check(&p, "SET w:1 v"), Ok(()));
        assert_eq!(check(&p, "GET w:1"), Err(Denied::Key));
        assert_eq!(check(&p, "EVAL x 1 r:1"), Err(Denied::Key), "scripts' keys need both");
        assert_eq!(check(&p, "EVAL_RO x 1 r:1"), Ok(()), "read-only scripts' keys need reading");
        for reads in ["GETDEL w:1", "SET w:1 v GET", "INCR w:1", "LPOP w:1", "GETSET w:1 v"] {
            assert_eq!(check(&p, reads), Err(Denied::Key), "{reads} returns what a write-only user may not read");
        }
        for reads in ["SPOP w:1", "ZPOPMIN w:1", "LMOVE w:1 w:2 LEFT LEFT", "GETEX w:1", "INCRBYFLOAT w:1 1", "RENAME w:1 w:2"] {
            assert_eq!(check(&p, reads), Err(Denied::Key), "{reads} returns what a write-only user may not read");
        }
        // A STORE reads its sources and writes its destination; COPY reads
        // its source; every key a numkeys argument counts is checked.
        assert_eq!(check(&p, "SINTERSTORE w:1 r:1 r:2"), Ok(()));
        assert_eq!(check(&p, "ZUNIONSTORE w:1 2 r:1 r:2"), Ok(()));
        assert_eq!(check(&p, "ZUNIONSTORE w:1 2 r:1 x:2"), Err(Denied::Key));
        assert_eq!(check(&p, "SINTERSTORE r:1 r:2"), Err(Denied::Key), "the destination needs writing");
        assert_eq!(check(&p, "COPY r:1 w:1"), Ok(()));
        assert_eq!(check(&p, "COPY w:1 w:2"), Err(Denied::Key));
        assert_eq!(check(&p, "SINTERCARD 2 r:1 w:1"), Err(Denied::Key));
        assert_eq!(check(&p, "SINTERCARD 2 r:1 r:2"), Ok(()));
        assert_eq!(check(&p, "PUBLISH news.a m"), Ok(()));
        assert_eq!(check(&p, "PUBLISH sport m"), Err(Denied::Channel));
        assert_eq!(check(&p, "SUBSCRIBE news.x"), Ok(()));
        assert_eq!(check(&p, "PSUBSCRIBE news.*"), Ok(()));
        assert_eq!(check(&p, "PSUBSCRIBE news.x*"), Err(Denied::Channel), "a pattern must be one the user has");
    }

    #[test]
    fn setuser_errors_are_redis_texts_and_change_nothing() {
        let mut ks = Keyspace::new();
        assert_eq!(apply_op(&mut ks, &AclOp::SetUser { name: "a".into(), rules: b("on >pw +get ~k"), base: vec![] }), Reply::ok());
        let before = ks.acl().clone();
        let r = apply_op(&mut ks, &AclOp::SetUser { name: "a".into(), rules: b("-get +nosuch"), base: vec![] });
        assert_eq!(r, Reply::error("ERR Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL"));
        assert_eq!(ks.acl(), &before);
        let r = apply_op(&mut ks, &AclOp::SetUser { name: "b".into(), rules: b("allkeys ~x"), base: vec![] });
        assert!(matches!(r, Reply::Error(e) if e.contains("Adding a pattern after the * pattern")));
        let r = apply_op(&mut ks, &AclOp::SetUser { name: "b".into(), rules: vec![Bytes::new()], base: vec![] });
        assert!(matches!(r, Reply::Error(e) if e.contains("Syntax error")), "an empty rule");
        let r = apply_op(&mut ks, &AclOp::SetUser { name: "b".into(), rules: vec![Bytes::from("~a b")], base: vec![] });
        assert!(matches!(r, Reply::Error(e) if e.contains("Syntax error")), "a pattern with a space");
        assert_eq!(apply_op(&mut ks, &AclOp::DelUser { names: vec!["default".into()] }), Reply::error("ERR The 'default' user cannot be removed"));
        assert_eq!(apply_op(&mut ks, &AclOp::DelUser { names: vec!["a".into(), "a".into(), "zz".into()] }), Reply::Int(1));
    }

    #[test]
    fn descriptions_and_files_round_trip() {
        let u = user_from_rules(&b("on >pw ~orders:* %R~ro:* &chan -@all +@lock +get")).unwrap();
        let line = describe(&u);
        assert_eq!(
            line,
            format!("on sanitize-payload #{} ~orders:* %R~ro:* resetchannels &chan -@all +@lock +get", hash_password(b"pw"))
        );
        let back = user_from_rules(&b(&line)).unwrap();
        assert_eq!(back, u);
        assert_eq!(describe(&default_user()), "on nopass sanitize-payload ~* &* +@all");
        let mut table = AclTable::default();
        table.users.insert("alice".into(), u);
        let parsed = parse_acl_file(&acl_file(&table)).unwrap();
        assert_eq!(parsed.len(), 2);
        assert!(parse_acl_file("user a on\nuser a off\n").unwrap_err().contains("Duplicate user"));
        assert!(parse_acl_file("usr a on\n").is_err());
    }
}
