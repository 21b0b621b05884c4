//! The cluster's words a user types for `study k8s`, each checked as Kubernetes checks it:
//! a toleration (`key[=value][:Effect]`), a Secret-backed environment variable
//! (`NAME=secret/key`), a node label (`key=value`), a quantity (`8`, `500m`, `64Gi`).

use std::str::FromStr;

use serde_json::{Value, json};

/// A toleration of a node taint: `nvidia.com/gpu:NoSchedule` (any value), `dedicated=bench`
/// (any effect), `dedicated=bench:NoExecute`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toleration {
    /// The taint's key.
    pub key: String,
    /// Its value; `None` tolerates any (`operator: Exists`).
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`; `None` tolerates every effect.
    pub effect: Option<String>,
}

impl FromStr for Toleration {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (rest, effect) = match text.rsplit_once(':') {
            Some((rest, effect)) => (rest, Some(effect)),
            None => (text, None),
        };
        if let Some(e) = effect
            && !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&e)
        {
            return Err(format!(
                "toleration `{text}`: the effect `{e}` is not NoSchedule, PreferNoSchedule or NoExecute"
            ));
        }
        let (key, value) = match rest.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (rest, None),
        };
        check_label_key(key).map_err(|e| format!("toleration `{text}`: {e}"))?;
        if let Some(v) = value {
            check_label_value(v).map_err(|e| format!("toleration `{text}`: {e}"))?;
        }
        Ok(Toleration {
            key: key.to_owned(),
            value: value.map(str::to_owned),
            effect: effect.map(str::to_owned),
        })
    }
}

impl Toleration {
    /// The object in a pod's `tolerations`.
    pub(crate) fn to_json(&self) -> Value {
        let mut t = match &self.value {
            Some(v) => json!({"key": self.key, "operator": "Equal", "value": v}),
            None => json!({"key": self.key, "operator": "Exists"}),
        };
        if let Some(e) = &self.effect {
            t["effect"] = json!(e);
        }
        t
    }
}

/// An environment variable of every pod read from a Secret, never inlined:
/// `HF_TOKEN=hf-token/token`, `OPENAI_API_KEY=bench-key/key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretEnv {
    /// The variable.
    pub name: String,
    /// The Secret's name.
    pub secret: String,
    /// The key in it.
    pub key: String,
}

impl FromStr for SecretEnv {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("--secret-env `{text}`: {why}; write NAME=secret/key");
        let (name, source) = text.split_once('=').ok_or_else(|| bad("no `=`"))?;
        let (secret, key) = source.split_once('/').ok_or_else(|| bad("no `/`"))?;
        let name_ok = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok {
            return Err(bad("the variable's name is not [A-Za-z_][A-Za-z0-9_]*"));
        }
        check_dns_subdomain(secret).map_err(|e| bad(&format!("the Secret's name {e}")))?;
        let key_ok = !key.is_empty()
            && key.len() <= 253
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c));
        if !key_ok {
            return Err(bad("the key is not [-._a-zA-Z0-9]+"));
        }
        Ok(SecretEnv {
            name: name.to_owned(),
            secret: secret.to_owned(),
            key: key.to_owned(),
        })
    }
}

/// A node label the pods must have: `nvidia.com/gpu.product=NVIDIA-GeForce-RTX-4090`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLabel {
    /// The label's key.
    pub key: String,
    /// Its value.
    pub value: String,
}

impl FromStr for NodeLabel {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (key, value) = text
            .split_once('=')
            .ok_or_else(|| format!("--node-selector `{text}`: write key=value"))?;
        check_label_key(key).map_err(|e| format!("--node-selector `{text}`: {e}"))?;
        check_label_value(value).map_err(|e| format!("--node-selector `{text}`: {e}"))?;
        Ok(NodeLabel {
            key: key.to_owned(),
            value: value.to_owned(),
        })
    }
}

/// A resource quantity as Kubernetes writes it: `8`, `500m`, `1.5`, `64Gi`, `100G`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity(pub String);

impl FromStr for Quantity {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        const SUFFIXES: [&str; 14] = [
            "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P",
        ];
        let number = SUFFIXES
            .iter()
            .find_map(|s| text.strip_suffix(s))
            .unwrap_or(text);
        let ok = !number.is_empty()
            && number.chars().all(|c| c.is_ascii_digit() || c == '.')
            && number.matches('.').count() <= 1
            && number.chars().any(|c| c.is_ascii_digit());
        if ok {
            Ok(Quantity(text.to_owned()))
        } else {
            Err(format!(
                "`{text}` is not a Kubernetes quantity: write e.g. 8, 500m, 64Gi"
            ))
        }
    }
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters of `[A-Za-z0-9._-]`, starting and ending alphanumeric.
fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        check_dns_subdomain(p).map_err(|e| format!("the key's prefix {e}"))?;
    }
    check_label_value(name).map_err(|e| format!("the key {e}"))?;
    if name.is_empty() {
        return Err("the key is empty".into());
    }
    Ok(())
}

/// A label value: empty, or at most 63 characters of `[A-Za-z0-9._-]`, alphanumeric at
/// both ends.
fn check_label_value(v: &str) -> Result<(), String> {
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let ok = v.is_empty()
        || (v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && ends(v.chars().next())
            && ends(v.chars().last()));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{v}` is not a label value (at most 63 of [A-Za-z0-9._-], alphanumeric at both ends)"
        ))
    }
}

/// A DNS subdomain (RFC 1123): lowercase alphanumerics, `-` and `.`, at most 253.
fn check_dns_subdomain(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{s}` is not a DNS subdomain (lowercase letters, digits, `-` and `.`)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_words_parse_as_kubernetes_reads_them() {
        let t: Toleration = "nvidia.com/gpu:NoSchedule".parse().unwrap();
        assert_eq!(
            t.to_json(),
            json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
        );
        let t: Toleration = "dedicated=bench".parse().unwrap();
        assert_eq!(
            t.to_json(),
            json!({"key": "dedicated", "operator": "Equal", "value": "bench"})
        );
        assert!("gpu:Sometimes".parse::<Toleration>().is_err());
        assert!("bad key!:NoSchedule".parse::<Toleration>().is_err());
        let s: SecretEnv = "HF_TOKEN=hf-token/token".parse().unwrap();
        assert_eq!((s.secret.as_str(), s.key.as_str()), ("hf-token", "token"));
        for bad in ["HF_TOKEN", "HF_TOKEN=x", "1X=s/k", "X=Bad_Secret/k", "X=s/"] {
            assert!(bad.parse::<SecretEnv>().is_err(), "{bad}");
        }
        let l: NodeLabel = "nvidia.com/gpu.product=NVIDIA-GeForce-RTX-4090"
            .parse()
            .unwrap();
        assert_eq!(l.key, "nvidia.com/gpu.product");
        assert!("novalue".parse::<NodeLabel>().is_err());
        assert!("k=v w".parse::<NodeLabel>().is_err());
        for good in ["8", "500m", "1.5", "64Gi", "100G"] {
            assert!(good.parse::<Quantity>().is_ok(), "{good}");
        }
        for bad in ["", "Gi", "8 Gi", "1.2.3", "-1", "8gb"] {
            assert!(bad.parse::<Quantity>().is_err(), "{bad}");
        }
    }
}
