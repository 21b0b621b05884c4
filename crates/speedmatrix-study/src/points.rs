//! A study's points: the grid's combinations and the listed ones, named,
//! and the templates filled in for each.

use std::collections::{BTreeMap, BTreeSet};

use crate::{ParamValue, ServerCommand, ServerSpec, Study, StudyError};

/// The most points a study may have: each is a server started and measured in
/// turn (hours of GPU time), and every point is held in memory with its
/// filled-in command and options while the study is planned.
pub const MAX_POINTS: u64 = 10_000;

/// One server configuration of a study.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Its name: a folder name (letters, digits, `-`, `_`, `.`, `=`).
    pub name: String,
    /// Its parameter values as they go into templates.
    pub values: BTreeMap<String, String>,
    /// The same values as the study file types them (a whole-value placeholder keeps its type).
    pub typed: BTreeMap<String, ParamValue>,
}

impl Study {
    /// Every point: the grid's combinations in order (the last parameter
    /// varies fastest), then the listed points.
    pub fn points(&self) -> Result<Vec<Point>, StudyError> {
        self.check_point_count()?;
        let mut combos: Vec<BTreeMap<String, ParamValue>> = Vec::new();
        if !self.parameters.is_empty() {
            combos.push(BTreeMap::new());
            for (key, values) in &self.parameters {
                combos = combos
                    .into_iter()
                    .flat_map(|c| {
                        values.iter().map(move |v| {
                            let mut c = c.clone();
                            c.insert(key.clone(), v.clone());
                            c
                        })
                    })
                    .collect();
            }
        }
        for p in &self.points {
            combos.push(p.clone());
        }
        let mut points = Vec::with_capacity(combos.len());
        let mut names = BTreeSet::new();
        for mut typed in combos {
            let given = typed.remove("name").map(|n| n.render());
            let values: BTreeMap<String, String> =
                typed.iter().map(|(k, v)| (k.clone(), v.render())).collect();
            let name = match given {
                Some(n) => n,
                None => match &self.point_name {
                    Some(t) => fill(t, &values, None, None, str::to_owned)?,
                    None => values
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join("_"),
                },
            };
            let name = folder_name(&name);
            if name.len() > MAX_NAME_BYTES {
                return Err(StudyError::Invalid(format!(
                    "a point's name is {} bytes (`{}…`): a folder's name holds at most {MAX_NAME_BYTES}; give the point a shorter `name` or a point_name template",
                    name.len(),
                    name.chars().take(40).collect::<String>()
                )));
            }
            if !names.insert(name.clone()) {
                return Err(StudyError::Invalid(format!(
                    "two points are both named `{name}`: give them a `name` or a point_name template"
                )));
            }
            points.push(Point {
                name,
                values,
                typed,
            });
        }
        Ok(points)
    }
}

/// The longest folder name file systems take (ext4, xfs, btrfs: 255 bytes).
const MAX_NAME_BYTES: usize = 255;

impl Study {
    /// Refuses a study of more than [`MAX_POINTS`] points before any is made: the
    /// grid's size is the product of its parameters' value counts.
    pub(crate) fn check_point_count(&self) -> Result<(), StudyError> {
        let grid = if self.parameters.is_empty() {
            Some(0)
        } else {
            self.parameters
                .values()
                .try_fold(1u64, |n, values| n.checked_mul(values.len() as u64))
        };
        let total = grid.and_then(|g| g.checked_add(self.points.len() as u64));
        if total.is_some_and(|t| t <= MAX_POINTS) {
            return Ok(());
        }
        let sizes: Vec<String> = self
            .parameters
            .iter()
            .map(|(k, v)| format!("{k} {}", v.len()))
            .collect();
        let count = total.map_or_else(|| "more than 2^64".to_owned(), |t| t.to_string());
        Err(StudyError::Invalid(format!(
            "the study has {count} points ([parameters] {} and {} listed points), more than the \
             {MAX_POINTS} a study may have: give fewer values, or split it into several studies",
            sizes.join(" × "),
            self.points.len()
        )))
    }
}

/// A name safe as one folder: anything outside `[A-Za-z0-9._=-]` becomes `-`.
fn folder_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._=-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = cleaned.trim_matches('.');
    if trimmed.is_empty() {
        "point".to_owned()
    } else {
        trimmed.to_owned()
    }
}

impl Point {
    /// `template` with `{parameter}`, `{port}` and `{point}` filled in (as text: for the
    /// server's command use [`Point::server_command`], which keeps each value one argument).
    pub fn fill(&self, template: &str, port: u16) -> Result<String, StudyError> {
        fill(
            template,
            &self.values,
            Some(port),
            Some(&self.name),
            str::to_owned,
        )
    }

    /// `template` filled in but for `{port}`, which stays as written (for a
    /// plan printed before any port is chosen).
    pub fn fill_shown(&self, template: &str) -> Result<String, StudyError> {
        let mut values = self.values.clone();
        values.insert("port".to_owned(), "{port}".to_owned());
        fill(template, &values, None, Some(&self.name), str::to_owned)
    }

    /// The point's server command on `port` (`None`: `{port}` stays as written, for a plan
    /// printed before a port is chosen): the template's words with every value one argument,
    /// or with `[server] shell = true` a shell script with every value quoted.
    pub fn server_command(
        &self,
        server: &ServerSpec,
        port: Option<u16>,
    ) -> Result<ServerCommand, StudyError> {
        let mut values = self.values.clone();
        if port.is_none() {
            values.insert("port".to_owned(), "{port}".to_owned());
        }
        crate::command::build(&server.command, server.shell, |t, quote| {
            fill(t, &values, port, Some(&self.name), quote)
        })
    }
}

fn fill(
    template: &str,
    values: &BTreeMap<String, String>,
    port: Option<u16>,
    point: Option<&str>,
    quote: fn(&str) -> String,
) -> Result<String, StudyError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return Ok(out);
        };
        let key = &after[..close];
        let value = match key {
            "port" => port
                .map(|p| p.to_string())
                .or_else(|| values.get("port").cloned()),
            "point" => point.map(str::to_owned),
            k => values.get(k).cloned(),
        };
        match value {
            Some(v) => out.push_str(&quote(&v)),
            None => {
                return Err(StudyError::UnknownPlaceholder {
                    template: template.to_owned(),
                    name: key.to_owned(),
                });
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn study(extra: &str) -> Study {
        // Top-level keys come before the first table.
        let (top, tables) = match extra.find('[') {
            Some(i) => extra.split_at(i),
            None => (extra, ""),
        };
        Study::from_toml(&format!(
            r#"name = "t"
{top}
[server]
command = "serve {{kv}} --port {{port}}"
[run]
args = ["--contexts", "0"]
{tables}"#
        ))
        .unwrap()
    }

    #[test]
    fn the_grid_is_every_combination_and_listed_points_follow() {
        let s = study(
            r#"[parameters]
kv = ["auto", "fp8"]
seqs = [64, 256]
[[points]]
name = "baseline"
kv = "auto"
seqs = 128
"#,
        );
        let names: Vec<String> = s.points().unwrap().into_iter().map(|p| p.name).collect();
        assert_eq!(
            names,
            [
                "kv=auto_seqs=64",
                "kv=auto_seqs=256",
                "kv=fp8_seqs=64",
                "kv=fp8_seqs=256",
                "baseline"
            ]
        );
        let p = &s.points().unwrap()[2];
        assert_eq!(
            p.fill(&s.server.command, 8123).unwrap(),
            "serve fp8 --port 8123"
        );
    }

    #[test]
    fn a_grid_of_more_points_than_a_study_may_have_is_refused_before_it_is_made() {
        let values: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        let list = values.join(", ");
        let s = study(&format!(
            "[parameters]\nkv = [{list}]\nseqs = [{list}]\nbatch = [{list}]\nblock = [{list}]\n"
        ));
        let start = std::time::Instant::now();
        let e = s.points().unwrap_err().to_string();
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        assert!(
            e.contains("100000000 points") && e.contains("more than the 10000"),
            "{e}"
        );
    }

    #[test]
    fn unknown_placeholders_and_study_flags_are_refused() {
        let s = study("[parameters]\nkv = [\"auto\"]\n");
        let e = s.points().unwrap()[0].fill("x {model}", 1).unwrap_err();
        assert!(e.to_string().contains("{model}"), "{e}");
        let bad = Study::from_toml(
            "name = \"t\"\n[server]\ncommand = \"x\"\n[parameters]\na = [1]\n[run]\nargs = [\"--url\", \"http://x\"]\n",
        )
        .unwrap_err();
        assert!(bad.to_string().contains("--url"), "{bad}");
        let none = Study::from_toml("name = \"t\"\n[server]\ncommand = \"x\"\n[run]\nargs = []\n")
            .unwrap_err();
        assert!(none.to_string().contains("no points"), "{none}");
        let typo = Study::from_toml(
            "name = \"t\"\n[server]\ncommand = \"x\"\nready_timeout = \"soon\"\n[parameters]\na = [1]\n[run]\nargs = []\n",
        )
        .unwrap_err();
        assert!(typo.to_string().contains("not a duration"), "{typo}");
    }

    #[test]
    fn duplicate_names_are_refused_and_names_are_folder_safe() {
        let s = study("point_name = \"same\"\n[parameters]\nkv = [\"a\", \"b\"]\n");
        assert!(s.points().unwrap_err().to_string().contains("both named"));
        let s = study("point_name = \"{kv}\"\n[parameters]\nkv = [\"a/b c\"]\n");
        assert_eq!(s.points().unwrap()[0].name, "a-b-c");
    }
}
