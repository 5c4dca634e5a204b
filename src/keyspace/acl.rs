//! ACL users: replicated state, as the log decides it (`ACL SETUSER`,
//! `ACL DELUSER`, `ACL LOAD` are log entries), so every node enforces the
//! same rules. Pure data; what the rules mean (which commands a category
//! holds, which keys a pattern allows) is in `commands::acl`.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Access a key pattern gives: `~p` both, `%R~p` reads, `%W~p` writes.
pub const KEY_READ: u8 = 1;
pub const KEY_WRITE: u8 = 2;

/// One user, as Redis 7 describes it: its own permissions (the root
/// selector), and `selectors`, each a further set of commands, keys and
/// channels: a command is allowed if the root or any one selector allows
/// all of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub enabled: bool,
    /// Any password is accepted.
    pub nopass: bool,
    /// SHA-256 of each password, lower-case hex.
    pub passwords: BTreeSet<String>,
    /// Commands: from all (`+@all`) or from none (`-@all`), then each rule
    /// since, in order (`+@read`, `-flushall`, `+client|id`, ...).
    pub all_commands: bool,
    pub command_rules: Vec<String>,
    /// Keys: every key (`allkeys`), else these patterns with their access.
    pub all_keys: bool,
    pub key_patterns: Vec<(u8, Bytes)>,
    /// Pub/sub channels: every one (`allchannels`), else these patterns.
    pub all_channels: bool,
    pub channel_patterns: Vec<Bytes>,
    /// Not in the user's own encoding (snapshot formats 4 and 5 have none):
    /// a snapshot carries them apart, in format 6 (`Keyspace::encode_to`).
    #[serde(skip)]
    pub selectors: Vec<Selector>,
}

/// One selector (`ACL SETUSER u (~app:* +get)`): commands, keys and channels
/// as a user's own, starting from none of each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selector {
    pub all_commands: bool,
    pub command_rules: Vec<String>,
    pub all_keys: bool,
    pub key_patterns: Vec<(u8, Bytes)>,
    pub all_channels: bool,
    pub channel_patterns: Vec<Bytes>,
}

impl User {
    /// A user as `ACL SETUSER` creates it: off, no password, no commands,
    /// no keys, no channels.
    pub fn new() -> User {
        User {
            enabled: false,
            nopass: false,
            passwords: BTreeSet::new(),
            all_commands: false,
            command_rules: Vec::new(),
            all_keys: false,
            key_patterns: Vec::new(),
            all_channels: false,
            channel_patterns: Vec::new(),
            selectors: Vec::new(),
        }
    }

    /// Everything allowed (the default user of a server without ACL rules).
    pub fn unrestricted(&self) -> bool {
        self.all_commands && self.command_rules.is_empty() && self.all_keys && self.all_channels
    }

    /// The user's own permissions, as a selector.
    pub fn root(&self) -> Selector {
        Selector {
            all_commands: self.all_commands,
            command_rules: self.command_rules.clone(),
            all_keys: self.all_keys,
            key_patterns: self.key_patterns.clone(),
            all_channels: self.all_channels,
            channel_patterns: self.channel_patterns.clone(),
        }
    }

    /// The user's own permissions, moved out (put them back with
    /// [`User::set_root`]): a rule applied to a user of many rules costs
    /// no copy of them.
    pub fn take_root(&mut self) -> Selector {
        Selector {
            all_commands: self.all_commands,
            command_rules: std::mem::take(&mut self.command_rules),
            all_keys: self.all_keys,
            key_patterns: std::mem::take(&mut self.key_patterns),
            all_channels: self.all_channels,
            channel_patterns: std::mem::take(&mut self.channel_patterns),
        }
    }

    /// Sets the user's own permissions from `root`.
    pub fn set_root(&mut self, root: Selector) {
        self.all_commands = root.all_commands;
        self.command_rules = root.command_rules;
        self.all_keys = root.all_keys;
        self.key_patterns = root.key_patterns;
        self.all_channels = root.all_channels;
        self.channel_patterns = root.channel_patterns;
    }
}

impl AclTable {
    /// Each user's selectors, for those that have any (snapshot format 6).
    pub fn selectors(&self) -> std::collections::BTreeMap<&String, &Vec<Selector>> {
        self.users.iter().filter(|(_, u)| !u.selectors.is_empty()).map(|(name, u)| (name, &u.selectors)).collect()
    }
}

impl Default for User {
    fn default() -> Self {
        User::new()
    }
}

/// Every user defined through the log. `default` is here only once an ACL
/// command defined it; until then each node's `--requirepass` decides it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclTable {
    pub users: BTreeMap<String, User>,
}
