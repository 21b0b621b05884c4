//! HTTPS: verified by default, accepted with `insecure`, against a local
//! server with a self-signed certificate (tests/fixtures, valid for 100 years).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use speedmatrix_client::{Client, ClientConfig, ErrorKind};
use tokio::net::TcpListener;

const CERT: &[u8] = include_bytes!("../fixtures/selfsigned.crt");
const KEY: &[u8] = include_bytes!("../fixtures/selfsigned.key");

/// An HTTPS server answering every request with an empty model list.
async fn serve_tls() -> String {
    let certs = vec![CertificateDer::from_pem_slice(CERT).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(KEY).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(socket).await else {
                    return;
                };
                let service = hyper::service::service_fn(|_req| async {
                    let body = Full::new(Bytes::from_static(
                        br#"{"object":"list","data":[{"id":"tls-model"}]}"#,
                    ));
                    Ok::<_, Infallible>(
                        hyper::Response::builder()
                            .header("content-type", "application/json")
                            .body(body)
                            .unwrap(),
                    )
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    url
}

#[tokio::test]
async fn insecure_accepts_a_self_signed_certificate() {
    let url = serve_tls().await;
    let client = Client::new(ClientConfig::new(url).insecure(true)).unwrap();
    let models = client.models().await.unwrap().unwrap();
    assert_eq!(models[0].id, "tls-model");
}

#[tokio::test]
async fn verification_rejects_a_self_signed_certificate() {
    let url = serve_tls().await;
    let client = Client::new(ClientConfig::new(url)).unwrap();
    let err = client.models().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
}
