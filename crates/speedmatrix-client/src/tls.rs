//! rustls setup: native roots, or no verification when asked for explicitly.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::ClientError;

/// TLS settings for the connector. Native roots are loaded only when the
/// base URL is `https:`, so plain-HTTP clients never touch the system store.
pub(crate) fn client_config(
    insecure: bool,
    https: bool,
) -> Result<rustls::ClientConfig, ClientError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|err| ClientError::InvalidConfig {
            reason: format!("TLS setup failed: {err}"),
        })?;
    if insecure {
        let verifier = Arc::new(NoCertificateVerification {
            algorithms: provider.signature_verification_algorithms,
        });
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth());
    }
    let mut roots = rustls::RootCertStore::empty();
    if https {
        let found = load_native_roots(&mut roots);
        if found == 0 {
            tracing::warn!(
                "no usable system CA certificates found; https requests will fail certificate verification"
            );
        }
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

fn load_native_roots(roots: &mut rustls::RootCertStore) -> usize {
    let loaded = rustls_native_certs::load_native_certs();
    for err in &loaded.errors {
        tracing::debug!("while loading system CA certificates: {err}");
    }
    let (added, _ignored) = roots.add_parsable_certificates(loaded.certs);
    added
}

/// Accepts any certificate but still checks handshake signatures, so the
/// session is encrypted to whoever answered, just not authenticated.
#[derive(Debug)]
struct NoCertificateVerification {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for NoCertificateVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
