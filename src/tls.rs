//! TLS with rustls, for the client port (`--tls-port`) and between nodes
//! (`--tls-cluster yes`), with Redis's option names and meanings.
//!
//! - Clients: the node shows `--tls-cert-file`/`--tls-key-file`; with
//!   `--tls-auth-clients yes` (the default, as Redis) a client must show a
//!   certificate signed by `--tls-ca-cert-file`, with `optional` it may, with
//!   `no` it is not asked.
//! - Peers: mutual TLS. Each side shows its certificate and accepts only a
//!   peer whose certificate chains to the CA. As Redis does for replication,
//!   the peer's host name is not checked: the CA is the cluster's identity,
//!   and the cluster secret is still proven inside the encrypted link.
//!
//! The files are read at start, on SIGHUP, and on `CONFIG SET tls-…`; a
//! reload that fails keeps the certificates in use and says why. Connections
//! already open keep theirs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// `--tls-auth-clients`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    Required,
    Optional,
    No,
}

impl ClientAuth {
    pub fn parse(s: &str) -> Result<ClientAuth, String> {
        match s.to_ascii_lowercase().as_str() {
            "yes" => Ok(ClientAuth::Required),
            "optional" => Ok(ClientAuth::Optional),
            "no" => Ok(ClientAuth::No),
            _ => Err("argument must be 'yes', 'no' or 'optional'".into()),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ClientAuth::Required => "yes",
            ClientAuth::Optional => "optional",
            ClientAuth::No => "no",
        }
    }
}

/// Where the certificates are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: Option<PathBuf>,
    pub auth_clients: ClientAuth,
}

impl TlsFiles {
    /// Settings to check a `CONFIG SET` argument against.
    pub fn placeholder() -> TlsFiles {
        TlsFiles { cert: PathBuf::new(), key: PathBuf::new(), ca: None, auth_clients: ClientAuth::Required }
    }
}

/// The TLS settings in use, swapped whole on reload.
struct Loaded {
    clients: TlsAcceptor,
    peers: Option<(TlsAcceptor, TlsConnector)>,
}

/// A node's TLS: what accepts clients and what secures peer links.
pub struct Tls {
    files: Mutex<TlsFiles>,
    cluster: bool,
    loaded: RwLock<Arc<Loaded>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files()).field("cluster", &self.cluster).finish()
    }
}

impl Tls {
    /// Reads the files; `cluster` also builds the mutual TLS of the peer
    /// port (which needs the CA).
    pub fn new(files: TlsFiles, cluster: bool) -> Result<Arc<Tls>, String> {
        let loaded = load(&files, cluster)?;
        Ok(Arc::new(Tls { files: Mutex::new(files), cluster, loaded: RwLock::new(Arc::new(loaded)) }))
    }

    fn current(&self) -> Arc<Loaded> {
        self.loaded.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Accepts client connections on the TLS port.
    pub fn client_acceptor(&self) -> TlsAcceptor {
        self.current().clients.clone()
    }

    /// Accepts and makes peer connections, with `--tls-cluster yes`.
    pub fn peer(&self) -> Option<(TlsAcceptor, TlsConnector)> {
        self.current().peers.clone()
    }

    pub fn cluster(&self) -> bool {
        self.cluster
    }

    pub fn files(&self) -> TlsFiles {
        self.files.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the files again (SIGHUP). On failure nothing changes.
    pub fn reload(&self) -> Result<(), String> {
        self.update(|_| Ok(()))
    }

    /// Edits the settings and loads the files they name, as one step
    /// (`CONFIG SET tls-…`, SIGHUP): concurrent changes never interleave,
    /// and on failure nothing changes.
    pub fn update(&self, edit: impl FnOnce(&mut TlsFiles) -> Result<(), String>) -> Result<(), String> {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = files.clone();
        edit(&mut next)?;
        let loaded = load(&next, self.cluster)?;
        *self.loaded.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(loaded);
        *files = next;
        Ok(())
    }
}

/// The server side of a handshake, within `limit`. A failure or a timeout
/// is counted (`raftlock_tls_handshake_failures_total`) and described.
pub async fn accept<IO: AsyncRead + AsyncWrite + Unpin>(
    acceptor: &TlsAcceptor,
    io: IO,
    limit: Duration,
) -> Result<tokio_rustls::server::TlsStream<IO>, String> {
    counted(tokio::time::timeout(limit, acceptor.accept(io)).await)
}

/// The client side of a handshake with a peer at `addr`, within `limit`;
/// counted and described as [`accept`].
pub async fn connect<IO: AsyncRead + AsyncWrite + Unpin>(
    connector: &TlsConnector,
    addr: &str,
    io: IO,
    limit: Duration,
) -> Result<tokio_rustls::client::TlsStream<IO>, String> {
    counted(tokio::time::timeout(limit, connector.connect(peer_server_name(addr), io)).await)
}

fn counted<S>(done: Result<std::io::Result<S>, tokio::time::error::Elapsed>) -> Result<S, String> {
    let why = match done {
        Ok(Ok(stream)) => return Ok(stream),
        Ok(Err(e)) => format!("TLS handshake failed: {e}"),
        Err(_) => "TLS handshake timed out".to_string(),
    };
    crate::metrics::record_tls_handshake_failure();
    Err(why)
}

/// The name a peer is reached by, for SNI. It is not checked (see above).
pub fn peer_server_name(addr: &str) -> ServerName<'static> {
    let host = match addr.rsplit_once(':') {
        Some((host, _)) => host.trim_start_matches('[').trim_end_matches(']'),
        None => addr,
    };
    ServerName::try_from(host.to_string()).unwrap_or_else(|_| ServerName::try_from("raftlock-peer").expect("a valid DNS name"))
}

/// The client side for an operator's command (`raftlock status`,
/// `raftlock backup`): the node's certificate must chain to `ca` and name
/// the host it is reached by; `cert` and `key`, if given, are shown to it.
pub fn operator_client(ca: &Path, cert_and_key: Option<(&Path, &Path)>) -> Result<Arc<ClientConfig>, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots(ca)?);
    let config = match cert_and_key {
        Some((cert, k)) => builder
            .with_client_auth_cert(certs(cert)?, key(k)?)
            .map_err(|e| format!("the certificate and key do not fit together: {e}"))?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read certificates from {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate in {}", path.display()));
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| format!("cannot read a private key from {}: {e}", path.display()))
}

fn roots(path: &Path) -> Result<Arc<RootCertStore>, String> {
    let mut store = RootCertStore::empty();
    for cert in certs(path)? {
        store.add(cert).map_err(|e| format!("bad CA certificate in {}: {e}", path.display()))?;
    }
    Ok(Arc::new(store))
}

fn load(files: &TlsFiles, cluster: bool) -> Result<Loaded, String> {
    let chain = certs(&files.cert)?;
    let key = key(&files.key)?;
    let roots = files.ca.as_deref().map(roots).transpose()?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let clients = match (files.auth_clients, &roots) {
        (ClientAuth::No, _) => builder.with_no_client_auth(),
        (auth, Some(roots)) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider());
            let verifier = if auth == ClientAuth::Optional { verifier.allow_unauthenticated() } else { verifier };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| e.to_string())?)
        }
        (_, None) => {
            return Err("tls-auth-clients yes/optional needs tls-ca-cert-file (or set tls-auth-clients no)".into())
        }
    }
    .with_single_cert(chain.clone(), key.clone_key())
    .map_err(|e| format!("the certificate and key do not fit together: {e}"))?;
    let peers = if cluster {
        let roots = roots.ok_or("tls-cluster needs tls-ca-cert-file")?;
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| e.to_string())?;
        let server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| e.to_string())?;
        let peer_verifier = WebPkiServerVerifier::builder_with_provider(roots, provider()).build().map_err(|e| e.to_string())?;
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly(peer_verifier)))
            .with_client_auth_cert(chain, key)
            .map_err(|e| e.to_string())?;
        Some((TlsAcceptor::from(Arc::new(server)), TlsConnector::from(Arc::new(client))))
    } else {
        None
    };
    Ok(Loaded { clients: TlsAcceptor::from(Arc::new(clients)), peers })
}

/// Accepts a peer whose certificate chains to the cluster's CA, whatever
/// name it was reached by.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(Error::InvalidCertificate(CertificateError::NotValidForName))
            | Err(Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
