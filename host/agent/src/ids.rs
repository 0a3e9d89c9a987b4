/// 16 random hex characters, for markers and temporary names nobody can predict.
pub fn nonce() -> String {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most `len` bytes into the buffer.
    unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
