//! Who may talk to this node: the default user's password (`--requirepass`,
//! `AUTH`, `HELLO ... AUTH`) and protected mode, with Redis 7's replies.
//!
//! The password is kept only as its SHA-256 digest (as Redis keeps ACL
//! passwords), compared in constant time, and never logged or shown (`INFO`,
//! `CONFIG GET`). It is a node setting, as in Redis: give every node of a
//! cluster the same one. A forwarded command is not checked again on the
//! leader: the node the client is connected to checked it, and peers prove
//! themselves with the cluster secret.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use sha2::{Digest, Sha256};

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

/// Equal digests, in time that does not depend on where they differ.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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

    /// Whether clients must authenticate before anything else.
    pub fn required(&self) -> bool {
        self.password.read().unwrap_or_else(|p| p.into_inner()).is_some()
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
    pub fn denies(&self, peer: IpAddr) -> bool {
        let loopback = match peer {
            IpAddr::V4(v4) => v4 == std::net::Ipv4Addr::LOCALHOST,
            IpAddr::V6(v6) => v6 == std::net::Ipv6Addr::LOCALHOST || v6.to_ipv4_mapped() == Some(std::net::Ipv4Addr::LOCALHOST),
        };
        self.protected_mode() && !self.required() && !loopback
    }

    /// `AUTH [user] password` (`user` None: `default`): `Ok` if it names the
    /// default user with its password (any password when it has none, as a
    /// Redis default user with `nopass`), else the error to reply.
    pub fn check(&self, user: Option<&[u8]>, password: &[u8]) -> Result<(), Reply> {
        let stored = *self.password.read().unwrap_or_else(|p| p.into_inner());
        match (user, stored) {
            (None, None) => Err(Reply::error(NO_PASSWORD_SET)),
            (Some(b"default"), None) => Ok(()),
            (None | Some(b"default"), Some(hash)) if same(&hash, &digest(password)) => Ok(()),
            _ => Err(Reply::error(WRONGPASS)),
        }
    }
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
        let auth = Auth::new(Some("s3cret"), true);
        assert!(auth.required());
        assert_eq!(auth.check(None, b"s3cret"), Ok(()));
        assert_eq!(auth.check(Some(b"default"), b"s3cret"), Ok(()));
        assert_eq!(auth.check(None, b"s3cre"), Err(Reply::error(WRONGPASS)));
        assert_eq!(auth.check(Some(b"alice"), b"s3cret"), Err(Reply::error(WRONGPASS)));
        auth.set_password(Some(""));
        assert!(!auth.required());
        assert_eq!(auth.check(None, b"x"), Err(Reply::error(NO_PASSWORD_SET)));
        assert_eq!(auth.check(Some(b"default"), b"anything"), Ok(()));
        assert_eq!(auth.check(Some(b"alice"), b"anything"), Err(Reply::error(WRONGPASS)));
    }

    #[test]
    fn protected_mode_turns_away_only_non_loopback_clients_without_a_password() {
        let auth = Auth::new(None, true);
        let far: IpAddr = "10.1.2.3".parse().unwrap();
        let other_loopback: IpAddr = "127.0.0.2".parse().unwrap();
        assert!(auth.denies(far) && auth.denies(other_loopback));
        assert!(!auth.denies("127.0.0.1".parse().unwrap()) && !auth.denies("::1".parse().unwrap()));
        assert!(!auth.denies("::ffff:127.0.0.1".parse().unwrap()));
        auth.set_password(Some("pw"));
        assert!(!auth.denies(far));
        auth.set_password(None);
        auth.set_protected_mode(false);
        assert!(!auth.denies(far));
    }
}
