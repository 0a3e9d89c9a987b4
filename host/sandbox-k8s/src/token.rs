//! Per-sandbox agent tokens, derived rather than stored: HMAC-SHA256(installation key,
//! sandbox id ‖ pod nonce). The pod carries the nonce and the token's hash; only holders of
//! the key (the host replicas) can compute the token, and a new pod under an old id gets a new
//! token.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The agent token of one pod: keyed by the host's secret, the id and the pod's nonce.
pub fn sandbox_token(key: &[u8], id: &str, nonce: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(id.as_bytes());
    mac.update(&[0]);
    mac.update(nonce.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// `bytes` random bytes, hex.
pub fn random_hex(bytes: usize) -> String {
    use rand::RngCore;
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    hex::encode(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_depend_on_key_id_and_nonce() {
        let t = sandbox_token(b"k", "sb", "n1");
        assert_eq!(t, sandbox_token(b"k", "sb", "n1"));
        assert_ne!(t, sandbox_token(b"k2", "sb", "n1"));
        assert_ne!(t, sandbox_token(b"k", "sb", "n2"));
        assert_ne!(sandbox_token(b"k", "a", "bc"), sandbox_token(b"k", "ab", "c"));
    }
}
