//! Option values read as their command-line text, so that a study file's `[run]` table takes
//! exactly what `speedmatrix run` takes: `max-tokens = 64` or `"64"`, `contexts = "0,16k"` or
//! `["0", "16k"]`, `duration = "30s"`, each parsed by the same `FromStr` as the flag.

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use serde::de::{self, Deserializer, SeqAccess, Visitor};

/// One value, as text or as the TOML/JSON scalar that prints as that text.
struct Scalar<T>(PhantomData<T>);

impl<'de, T> Visitor<'de> for Scalar<T>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value as the command line spells it (text, a number or a boolean)")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(|e| E::custom(format!("`{v}`: {e}")))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
}

/// A required value.
pub(crate) fn one<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
{
    d.deserialize_any(Scalar::<T>(PhantomData))
}

/// An optional value (absent: `None`).
pub(crate) fn opt<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
{
    one(d).map(Some)
}

/// One value read by a parse function (a flag's [`super::limits`] range), as text or as the
/// scalar that prints as that text.
struct ScalarWith<T>(fn(&str) -> Result<T, String>);

impl<'de, T> Visitor<'de> for ScalarWith<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value as the command line spells it (text or a number)")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.0)(v).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
}

impl<'de, T> de::DeserializeSeed<'de> for ScalarWith<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
}

/// A list read by a parse function: an array, or comma-separated text.
struct ListWith<T>(fn(&str) -> Result<T, String>);

impl<'de, T> Visitor<'de> for ListWith<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list: an array, or comma-separated text as the command line takes it")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<T>, E> {
        v.split(',')
            .map(|part| (self.0)(part.trim()).map_err(E::custom))
            .collect()
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Vec<T>, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Vec<T>, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Vec<T>, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(v) = seq.next_element_seed(ScalarWith(self.0))? {
            out.push(v);
        }
        Ok(out)
    }
}

/// A required value read by `parse`.
pub(crate) fn one_with<'de, D, T>(d: D, parse: fn(&str) -> Result<T, String>) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    d.deserialize_any(ScalarWith(parse))
}

/// A list read by `parse`.
pub(crate) fn list_with<'de, D, T>(
    d: D,
    parse: fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
{
    d.deserialize_any(ListWith(parse))
}

/// The JSON Schema of a value given as text or a scalar (`text::one`, `text::opt`).
#[cfg(feature = "schemars")]
#[allow(dead_code, reason = "describes the accepted forms in the schema only")]
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
pub(crate) enum ScalarText {
    /// As the command line spells it.
    Text(String),
    /// A number.
    Number(f64),
    /// A boolean.
    Flag(bool),
}

/// The JSON Schema of a list given as an array or as comma-separated text (`limits::*::opt_list`).
#[cfg(feature = "schemars")]
#[allow(dead_code, reason = "describes the accepted forms in the schema only")]
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
pub(crate) enum ListText {
    /// Comma-separated, as the command line takes it.
    Text(String),
    /// One value each.
    Values(Vec<ScalarText>),
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use speedmatrix_units::Tokens;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Probe {
        #[serde(default, deserialize_with = "crate::limits::contexts::opt_list")]
        contexts: Option<Vec<Tokens>>,
        #[serde(default, deserialize_with = "super::opt")]
        max: Option<Tokens>,
        #[serde(default, deserialize_with = "crate::limits::window::opt")]
        window: Option<std::time::Duration>,
    }

    #[test]
    fn text_and_native_values_read_alike() {
        let a: Probe =
            serde_json::from_str(r#"{"contexts": "0, 16k", "max": "2k", "window": "30s"}"#)
                .unwrap();
        let b: Probe =
            serde_json::from_str(r#"{"contexts": [0, "16k"], "max": 2048, "window": "30s"}"#)
                .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.contexts, Some(vec![Tokens::ZERO, Tokens::kibi(16)]));
        assert_eq!(a.window, Some(std::time::Duration::from_secs(30)));
        let none: Probe = serde_json::from_str("{}").unwrap();
        assert_eq!(none.contexts, None);
        let err = serde_json::from_str::<Probe>(r#"{"max": "lots"}"#).unwrap_err();
        assert!(err.to_string().contains("`lots`"), "{err}");
        // A value out of its flag's range is refused with the flag and the limit.
        let err = serde_json::from_str::<Probe>(r#"{"window": "1000000h"}"#).unwrap_err();
        assert!(
            err.to_string()
                .contains("--duration must be at most 1day, not 1000000h"),
            "{err}"
        );
    }
}
