//! HChaCha20 (draft-irtf-cfrg-xchacha-03, section 2.2), the step that turns XChaCha20's 24-byte
//! nonce into a ChaCha20 key: ChaCha20's 20 rounds over the constants, the key and the nonce's
//! first 16 bytes, without the final addition; the first and last rows of the state are the
//! subkey. ring seals with the subkey (`seal.rs`). Twenty lines here rather than the `chacha20`
//! crate and its five dependencies in every build; a property test checks it against that crate
//! (a dev-dependency), and the draft's known answers against both.

/// The subkey of `key` for a nonce beginning with `nonce`.
pub(crate) fn hchacha20(key: &[u8; 32], nonce: &[u8; 16]) -> [u8; 32] {
    let word = |bytes: &[u8], i: usize| {
        u32::from_le_bytes([
            bytes[4 * i],
            bytes[4 * i + 1],
            bytes[4 * i + 2],
            bytes[4 * i + 3],
        ])
    };
    // "expand 32-byte k", then the key, then the nonce.
    let mut s = [
        0x6170_7865,
        0x3320_646e,
        0x7962_2d32,
        0x6b20_6574,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    for i in 0..8 {
        s[4 + i] = word(key, i);
    }
    for i in 0..4 {
        s[12 + i] = word(nonce, i);
    }
    for _ in 0..10 {
        // A column round, then a diagonal round.
        for [a, b, c, d] in [
            [0, 4, 8, 12],
            [1, 5, 9, 13],
            [2, 6, 10, 14],
            [3, 7, 11, 15],
            [0, 5, 10, 15],
            [1, 6, 11, 12],
            [2, 7, 8, 13],
            [3, 4, 9, 14],
        ] {
            s[a] = s[a].wrapping_add(s[b]);
            s[d] = (s[d] ^ s[a]).rotate_left(16);
            s[c] = s[c].wrapping_add(s[d]);
            s[b] = (s[b] ^ s[c]).rotate_left(12);
            s[a] = s[a].wrapping_add(s[b]);
            s[d] = (s[d] ^ s[a]).rotate_left(8);
            s[c] = s[c].wrapping_add(s[d]);
            s[b] = (s[b] ^ s[c]).rotate_left(7);
        }
    }
    let mut subkey = [0u8; 32];
    for (i, w) in s[..4].iter().chain(&s[12..]).enumerate() {
        subkey[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    subkey
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The draft's test vector for HChaCha20 (section 2.2.1).
    #[test]
    fn the_drafts_known_answer() {
        let key: [u8; 32] = std::array::from_fn(|i| i as u8);
        let nonce = [
            0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x4a, 0x00, 0x00, 0x00, 0x00, 0x31, 0x41,
            0x59, 0x27,
        ];
        let expected = [
            0x82, 0x41, 0x3b, 0x42, 0x27, 0xb2, 0x7b, 0xfe, 0xd3, 0x0e, 0x42, 0x50, 0x8a, 0x87,
            0x7d, 0x73, 0xa0, 0xf9, 0xe4, 0xd5, 0x8a, 0x74, 0xa8, 0x53, 0xc1, 0x2e, 0xc4, 0x13,
            0x26, 0xd3, 0xec, 0xdc,
        ];
        assert_eq!(hchacha20(&key, &nonce), expected);
        let theirs = chacha20::hchacha::<chacha20::R20>(&key.into(), &nonce.into());
        assert_eq!(<[u8; 32]>::from(theirs), expected);
    }

    proptest! {
        #[test]
        fn the_same_subkey_as_the_chacha20_crate(key: [u8; 32], nonce: [u8; 16]) {
            let theirs = chacha20::hchacha::<chacha20::R20>(&key.into(), &nonce.into());
            prop_assert_eq!(hchacha20(&key, &nonce), <[u8; 32]>::from(theirs));
        }
    }
}
