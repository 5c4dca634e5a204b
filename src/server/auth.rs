//! Who may talk to this node: users and their passwords (`AUTH`, `HELLO ...
//! AUTH`), and protected mode, with Redis 7's replies.
//!
//! The users are the ACL users the log defined (`commands::acl`), the same
//! on every node. Until the log defines `default`, it is the built-in one
//! (every permission) with this node's `--requirepass`, as in Redis: give
//! every node of a cluster the same. Passwords are kept only as SHA-256
//! digests, compared in constant time, and never logged or shown (`INFO`,
//! `CONFIG GET`). A forwarded command is not checked again on the leader:
//! the node the client is connected to checked it, and peers prove
//! themselves with the cluster secret.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use sha2::{Digest, Sha256};

use crate::commands::acl;
use crate::keyspace::acl::{AclTable, User};
use crate::protocol::Reply;

/// What Redis 7.0 answers (then closes) to a client from anywhere but the
/// loopback interface while protected mode is on and the default user has
/// no password; word for word, typo included.
pub const PROTECTED_MODE_DENIED: &str = "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

pub const NOAUTH: &str = "NOAUTH Authentication required.";
pub const NOAUTH_HELLO: &str = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time";
pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
const NO_PASSWORD_SET: &str = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?";

/// The only user, `default`, and its password.
pub struct Auth {
    password: RwLock<Option<[u8; 32]>>,
    protected_mode: AtomicBool,
}

fn digest(password: &[u8]) -> [u8; 32] {
    Sha256::digest(password).into()
}


impl Auth {
    /// `password`: the default user's (none or empty: no password).
    pub fn new(password: Option<&str>, protected_mode: bool) -> Auth {
        let auth = Auth { password: RwLock::new(None), protected_mode: AtomicBool::new(protected_mode) };
        auth.set_password(password);
        auth
    }

    /// `CONFIG SET requirepass`: a new password for new authentications (an
    /// empty one removes it). Connections already authenticated stay so.
    pub fn set_password(&self, password: Option<&str>) {
        let hashed = password.filter(|p| !p.is_empty()).map(|p| digest(p.as_bytes()));
        *self.password.write().unwrap_or_else(|p| p.into_inner()) = hashed;
    }

    /// The `default` user: as the log defined it, or the built-in one with
    /// this node's password.
    pub fn default_user(&self, table: &AclTable) -> User {
        if let Some(u) = table.users.get("default") {
            return u.clone();
        }
        let mut u = acl::default_user();
        if let Some(hash) = *self.password.read().unwrap_or_else(|p| p.into_inner()) {
            u.nopass = false;
            u.passwords.insert(hash.iter().map(|b| format!("{b:02x}")).collect());
        }
        u
    }

    /// Whether clients must authenticate before anything else (a new
    /// connection is the default user only if it needs no password).
    pub fn required(&self, table: &AclTable) -> bool {
        let u = self.default_user(table);
        !(u.enabled && u.nopass)
    }

    pub fn protected_mode(&self) -> bool {
        self.protected_mode.load(Ordering::Relaxed)
    }

    pub fn set_protected_mode(&self, on: bool) {
        self.protected_mode.store(on, Ordering::Relaxed);
    }

    /// Whether a client connecting from `peer` must be turned away (with
    /// [`PROTECTED_MODE_DENIED`]): protected mode is on, the default user has
    /// no password, and the client is not on the loopback interface (Redis
    /// counts only 127.0.0.1 and ::1 as such).
    pub fn denies(&self, peer: IpAddr, table: &AclTable) -> bool {
        let loopback = match peer {
            IpAddr::V4(v4) => v4 == std::net::Ipv4Addr::LOCALHOST,
            IpAddr::V6(v6) => v6 == std::net::Ipv6Addr::LOCALHOST || v6.to_ipv4_mapped() == Some(std::net::Ipv4Addr::LOCALHOST),
        };
        self.protected_mode() && self.default_user(table).nopass && !loopback
    }

    /// `AUTH [user] password` (`user` None: `default`): the user's name if
    /// the password is one of its (any, for a user with `nopass`) and it is
    /// on, else the error to reply.
    pub fn check(&self, user: Option<&[u8]>, password: &[u8], table: &AclTable) -> Result<String, Reply> {
        let name = String::from_utf8_lossy(user.unwrap_or(b"default")).into_owned();
        let u = if name == "default" {
            self.default_user(table)
        } else {
            match table.users.get(&name) {
                Some(u) => u.clone(),
                None => return Err(Reply::error(WRONGPASS)),
            }
        };
        if user.is_none() && u.nopass && u.enabled {
            return Err(Reply::error(NO_PASSWORD_SET));
        }
        let given = acl::hash_password(password);
        let matches = u.passwords.iter().fold(false, |found, h| found | same_text(h, &given));
        if u.enabled && (u.nopass || matches) {
            Ok(name)
        } else {
            Err(Reply::error(WRONGPASS))
        }
    }
}

/// Equal strings, in time that does not depend on where they differ.
fn same_text(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The commands a client may send before it has authenticated.
pub fn allowed_before_auth(name: &str) -> bool {
    matches!(name, "auth" | "hello" | "quit" | "reset")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_checked_for_the_default_user_only() {
        let none = AclTable::default();
        let auth = Auth::new(Some("s3cret"), true);
        assert!(auth.required(&none));
        assert_eq!(auth.check(None, b"s3cret", &none), Ok("default".into()));
        assert_eq!(auth.check(Some(b"default"), b"s3cret", &none), Ok("default".into()));
        assert_eq!(auth.check(None, b"s3cre", &none), Err(Reply::error(WRONGPASS)));
        assert_eq!(auth.check(Some(b"alice"), b"s3cret", &none), Err(Reply::error(WRONGPASS)));
        auth.set_password(Some(""));
        assert!(!auth.required(&none));
        assert_eq!(auth.check(None, b"x", &none), Err(Reply::error(NO_PASSWORD_SET)));
        assert_eq!(auth.check(Some(b"default"), b"anything", &none), Ok("default".into()));
        assert_eq!(auth.check(Some(b"alice"), b"anything", &none), Err(Reply::error(WRONGPASS)));
    }

    #[test]
    fn acl_users_authenticate_and_a_defined_default_overrides_requirepass() {
        let mut table = AclTable::default();
        table.users.insert("alice".into(), acl::user_from_rules(&["on".into(), ">pw".into()]).unwrap());
        table.users.insert("bob".into(), acl::user_from_rules(&["off".into(), ">pw".into()]).unwrap());
        let auth = Auth::new(Some("node-pass"), true);
        assert_eq!(auth.check(Some(b"alice"), b"pw", &table), Ok("alice".into()));
        assert_eq!(auth.check(Some(b"alice"), b"nope", &table), Err(Reply::error(WRONGPASS)));
        assert_eq!(auth.check(Some(b"bob"), b"pw", &table), Err(Reply::error(WRONGPASS)), "bob is off");
        assert_eq!(auth.check(None, b"node-pass", &table), Ok("default".into()));
        table.users.insert("default".into(), acl::user_from_rules(&["on".into(), ">cluster-pass".into(), "+@all".into(), "~*".into()]).unwrap());
        assert_eq!(auth.check(None, b"node-pass", &table), Err(Reply::error(WRONGPASS)));
        assert_eq!(auth.check(None, b"cluster-pass", &table), Ok("default".into()));
        assert!(auth.required(&table));
    }

    #[test]
    fn protected_mode_turns_away_only_non_loopback_clients_without_a_password() {
        let none = AclTable::default();
        let auth = Auth::new(None, true);
        let far: IpAddr = "10.1.2.3".parse().unwrap();
        let other_loopback: IpAddr = "127.0.0.2".parse().unwrap();
        assert!(auth.denies(far, &none) && auth.denies(other_loopback, &none));
        assert!(!auth.denies("127.0.0.1".parse().unwrap(), &none) && !auth.denies("::1".parse().unwrap(), &none));
        assert!(!auth.denies("::ffff:127.0.0.1".parse().unwrap(), &none));
        auth.set_password(Some("pw"));
        assert!(!auth.denies(far, &none));
        auth.set_password(None);
        auth.set_protected_mode(false);
        assert!(!auth.denies(far, &none));
    }
}
