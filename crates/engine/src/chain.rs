//! The per-tenant hash chain.
//!
//! `hash(n) = sha256(hash(n-1) || canonical(envelope(n)))`, where
//! `canonical` is the RFC 8785 form of the envelope without its hash and
//! `hash(0)` is [`GENESIS`], 32 zero bytes. The previous hash enters as its
//! 32 raw bytes; hashes are stored as 64 lowercase hex characters.
//!
//! [`canonical_envelope`] writes the canonical form directly from the
//! envelope's fields (their names are ASCII, so their UTF-16 order is the
//! fixed order below), which is what lets `verify` hash without building
//! JSON values; a unit test pins it to the generic canonicaliser.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use crate::canonical::write_string;

/// The hash before a tenant's first event.
pub const GENESIS: [u8; 32] = [0; 32];

/// A chain hash.
pub type Hash = [u8; 32];

/// The fields of an envelope as stored, the payload already canonical.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvelopeFields<'a> {
    pub actor: &'a str,
    pub causation_id: Option<&'a str>,
    pub correlation_id: &'a str,
    pub id: &'a str,
    pub occurred_at: &'a str,
    /// RFC 8785 text of the payload object.
    pub payload: &'a str,
    pub seq: u64,
    pub tenant: &'a str,
    pub event_type: &'a str,
}

/// Appends the canonical JSON of the envelope (without `hash`) to `out`.
pub fn canonical_envelope(f: &EnvelopeFields<'_>, out: &mut String) {
    canonical_head(f, out);
    out.push_str(f.payload);
    canonical_tail(f, out);
}

/// The canonical form up to the payload (`{"actor":...,"payload":`).
fn canonical_head(f: &EnvelopeFields<'_>, out: &mut String) {
    out.push_str("{\"actor\":");
    write_string(out, f.actor);
    out.push_str(",\"causation_id\":");
    match f.causation_id {
        Some(c) => write_string(out, c),
        None => out.push_str("null"),
    }
    out.push_str(",\"correlation_id\":");
    write_string(out, f.correlation_id);
    out.push_str(",\"id\":");
    write_string(out, f.id);
    out.push_str(",\"occurred_at\":");
    write_string(out, f.occurred_at);
    out.push_str(",\"payload\":");
}

/// The canonical form after the payload (`,"seq":...}`).
fn canonical_tail(f: &EnvelopeFields<'_>, out: &mut String) {
    out.push_str(",\"seq\":");
    // Integers below 2^53 print the same in ECMAScript and in Rust.
    let _ = write!(out, "{}", f.seq);
    out.push_str(",\"tenant\":");
    write_string(out, f.tenant);
    out.push_str(",\"type\":");
    write_string(out, f.event_type);
    out.push('}');
}

/// One link: `sha256(prev || canonical)`.
pub fn link(prev: &Hash, canonical: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update(prev);
    h.update(canonical);
    h.finalize().into()
}

/// The hash of an envelope after `prev`: `link(prev, canonical form)`,
/// with the payload (most of the bytes) hashed where it lies rather than
/// copied into `scratch` with the rest.
pub fn hash_envelope(prev: &Hash, f: &EnvelopeFields<'_>, scratch: &mut String) -> Hash {
    scratch.clear();
    canonical_head(f, scratch);
    let head = scratch.len();
    canonical_tail(f, scratch);
    let mut h = Sha256::new();
    h.update(prev);
    h.update(&scratch.as_bytes()[..head]);
    h.update(f.payload.as_bytes());
    h.update(&scratch.as_bytes()[head..]);
    h.finalize().into()
}

/// Reusable buffers for [`hash_envelopes`].
#[derive(Debug, Default)]
pub struct LinkScratch {
    /// Per link: the previous hash, the canonical form up to the payload,
    /// and the form after it, one after the other.
    bytes: Vec<u8>,
    text: String,
    /// Per link: where its head and its tail start and where it ends.
    spans: Vec<(usize, usize, usize)>,
}

/// [`hash_envelope`] for many links at once: link `i` is `fields[i]` after
/// `prevs[i]`, its hash goes to `out[i]`. The links are independent
/// messages, so they are hashed in lockstep, one per SIMD lane (AVX-512 or
/// several SHA-NI streams, whichever the CPU runs fastest), where one
/// chain's links can only be hashed one after another. `verify` checks each
/// link against the stored hash before it, which makes its links
/// independent.
pub fn hash_envelopes(
    prevs: &[Hash],
    fields: &[EnvelopeFields<'_>],
    scratch: &mut LinkScratch,
    out: &mut [Hash],
) {
    assert!(prevs.len() == fields.len() && out.len() == fields.len());
    let LinkScratch { bytes, text, spans } = scratch;
    bytes.clear();
    spans.clear();
    for (prev, f) in prevs.iter().zip(fields) {
        let start = bytes.len();
        bytes.extend_from_slice(prev);
        text.clear();
        canonical_head(f, text);
        bytes.extend_from_slice(text.as_bytes());
        let tail = bytes.len();
        text.clear();
        canonical_tail(f, text);
        bytes.extend_from_slice(text.as_bytes());
        spans.push((start, tail, bytes.len()));
    }
    let messages: Vec<tape_sha256::Message<'_>> = spans
        .iter()
        .zip(fields)
        .map(|(&(start, tail, end), f)| tape_sha256::Message {
            prefix: &bytes[start..tail],
            body: f.payload.as_bytes(),
            tail: &bytes[tail..end],
        })
        .collect();
    tape_sha256::hash_messages(&messages, out);
}

/// Lowercase hex of a hash.
pub fn to_hex(h: &Hash) -> String {
    hex::encode(h)
}

/// Parses 64 lowercase hex characters. One table lookup per character and
/// one check at the end (verify parses every stored hash).
pub fn from_hex(s: &str) -> Option<Hash> {
    const INVALID: u8 = 0x10;
    const NIBBLES: [u8; 256] = {
        let mut t = [INVALID; 256];
        let mut c = 0;
        while c < 10 {
            t[b'0' as usize + c] = c as u8;
            c += 1;
        }
        let mut c = 0;
        while c < 6 {
            t[b'a' as usize + c] = 10 + c as u8;
            c += 1;
        }
        t
    };
    let b: &[u8; 64] = s.as_bytes().try_into().ok()?;
    let mut out = [0u8; 32];
    let mut seen = 0;
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        let (hi, lo) = (NIBBLES[pair[0] as usize], NIBBLES[pair[1] as usize]);
        seen |= hi | lo;
        *o = hi << 4 | lo;
    }
    (seen & INVALID == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::to_canonical_string;
    use crate::envelope::Envelope;
    use serde_json::json;

    #[test]
    fn direct_form_equals_generic_canonical_form() {
        let payload =
            json!({"b": [1.5e-7, "\u{2028}"], "a": {"\u{1f600}": null, "\u{fb01}": true}});
        let env = Envelope {
            id: "01J0000000000000000000000".into(),
            event_type: "ORDER_PLACED".into(),
            tenant: "t1".into(),
            seq: 42,
            correlation_id: "c\"1".into(),
            causation_id: None,
            actor: "user\n7".into(),
            occurred_at: "2030-01-01T00:00:00.000Z".into(),
            payload: payload.clone(),
            trace: None,
        };
        let generic = to_canonical_string(&serde_json::to_value(&env).unwrap());
        let p = to_canonical_string(&payload);
        let mut direct = String::new();
        canonical_envelope(
            &EnvelopeFields {
                actor: &env.actor,
                causation_id: None,
                correlation_id: &env.correlation_id,
                id: &env.id,
                occurred_at: &env.occurred_at,
                payload: &p,
                seq: 42,
                tenant: "t1",
                event_type: "ORDER_PLACED",
            },
            &mut direct,
        );
        assert_eq!(direct, generic);
    }

    #[test]
    fn hashing_in_pieces_is_hashing_the_canonical_form() {
        let prev = link(&GENESIS, b"x");
        for (payload, causation) in [("{}", None), (r#"{"a":[1,"\u0001"]}"#, Some("c"))] {
            let f = EnvelopeFields {
                actor: "a\"b",
                causation_id: causation,
                correlation_id: "c",
                id: "i",
                occurred_at: "2030-01-01T00:00:00.000Z",
                payload,
                seq: 9_007_199_254_740_991,
                tenant: "t",
                event_type: "T",
            };
            let mut whole = String::new();
            canonical_envelope(&f, &mut whole);
            let mut scratch = String::from("left over");
            assert_eq!(
                hash_envelope(&prev, &f, &mut scratch),
                link(&prev, whole.as_bytes())
            );
        }
    }

    #[test]
    fn hashing_many_links_at_once_is_hashing_each() {
        // Sizes across block and padding edges, and more links than one
        // batch of lanes holds, so every kernel path and the remainder run.
        let payloads: Vec<String> = (0..150)
            .map(|i| format!("{{\"blob\":\"{}\"}}", "x".repeat(i * 13 % 1200)))
            .collect();
        let ids: Vec<String> = (0..150).map(|i| "i".repeat(i % 70)).collect();
        let fields: Vec<EnvelopeFields<'_>> = (0..150)
            .map(|i| EnvelopeFields {
                actor: "a",
                causation_id: (i % 3 == 0).then_some("c"),
                correlation_id: "c",
                id: &ids[i],
                occurred_at: "2030-01-01T00:00:00.000Z",
                payload: &payloads[i],
                seq: i as u64 + 1,
                tenant: "t",
                event_type: "T",
            })
            .collect();
        let prevs: Vec<Hash> = (0..150).map(|i| link(&GENESIS, &[i as u8])).collect();
        let mut scratch = LinkScratch::default();
        for n in [0, 1, 15, 16, 17, 33, 150] {
            let mut out = vec![[0u8; 32]; n];
            hash_envelopes(&prevs[..n], &fields[..n], &mut scratch, &mut out);
            let mut one = String::new();
            for i in 0..n {
                assert_eq!(
                    out[i],
                    hash_envelope(&prevs[i], &fields[i], &mut one),
                    "link {i} of {n}"
                );
            }
        }
    }

    #[test]
    fn genesis_link_is_sha256_of_zeros_and_body() {
        let h = link(&GENESIS, b"{}");
        let mut bytes = vec![0u8; 32];
        bytes.extend_from_slice(b"{}");
        let want: Hash = Sha256::digest(&bytes).into();
        assert_eq!(h, want);
        assert_eq!(from_hex(&to_hex(&h)), Some(h));
    }

    #[test]
    fn hex_is_lowercase_and_exactly_64_characters() {
        let h = link(&GENESIS, b"x");
        let hex = to_hex(&h);
        assert_eq!(from_hex(&hex), Some(h));
        for bad in [
            hex.to_uppercase(),
            hex[1..].to_owned(),
            format!("{hex}0"),
            format!("g{}", &hex[1..]),
            format!("{}/", &hex[..63]),
            format!("{}:", &hex[..63]),
            format!("{}`", &hex[..63]),
        ] {
            assert_eq!(from_hex(&bad), None, "{bad}");
        }
        let zeros = "0".repeat(64);
        assert_eq!(from_hex(&zeros), Some([0; 32]));
        assert_eq!(from_hex(&"f".repeat(64)), Some([0xff; 32]));
    }
}
