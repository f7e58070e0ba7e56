//! The repository's documents held to the code: `ARCHITECTURE.md` names every source file and
//! the platform modules' items, the names the documents give exist, and every proptest
//! regression file is one a test reads.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A file of the repository, with `\n` line ends whatever the checkout made them.
fn read(path: &str) -> String {
    let text = fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.replace("\r\n", "\n")
}

/// The files under `dir` (relative to the root) whose names end in `suffix`, as `/` paths.
fn files(dir: &str, suffix: &str) -> Vec<String> {
    fn walk(dir: &Path, suffix: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if matches!(name.to_str(), Some("target" | ".git" | "node_modules")) {
                continue;
            }
            if path.is_dir() {
                walk(&path, suffix, out);
            } else if name.to_string_lossy().ends_with(suffix) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join(dir), suffix, &mut out);
    let mut names: Vec<String> = out
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(root()).unwrap().to_string_lossy();
            rel.replace('\\', "/")
        })
        .collect();
    names.sort();
    names
}

/// The inline code spans of a Markdown text, outside fenced blocks.
fn code_spans(markdown: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            prose.push_str("\n\n");
        } else if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    // A span never crosses a paragraph.
    let mut spans = Vec::new();
    for paragraph in prose.split("\n\n") {
        for (i, piece) in paragraph.split('`').enumerate() {
            if i % 2 == 1 {
                spans.push(piece.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
    }
    spans
}

/// Rust source without its comments (line comments only: the crate writes no block comments).
fn code_of(source: &str) -> String {
    source
        .lines()
        .map(|l| match l.trim_start().starts_with("//") {
            true => "",
            false => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// The crates whose items the documents name besides this one's: their paths are not checked.
const EXTERNAL: &[&str] = &[
    "std",
    "core",
    "alloc",
    "libc",
    "tokio",
    "serde",
    "serde_json",
    "windows_sys",
    "uuid",
    "sha2",
    "thiserror",
    "tempfile",
    "proptest",
    "clap",
    "dir_lock",
    "fs2",
    "fd_lock",
    "cargo",
];

/// The blocks of `code` that belong to the type `name`: its definition (`struct`, `enum`,
/// `trait`) and its `impl` blocks (their fields, variants and methods), each from its first
/// line to the line that closes it at the same indentation.
fn blocks_of(code: &str, name: &str) -> String {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let w: Vec<&str> = words(t).collect();
        let head = w
            .windows(2)
            .any(|p| matches!(p[0], "struct" | "enum" | "trait") && p[1] == name)
            || (w.first() == Some(&"impl") && impl_target(t) == Some(name));
        if !head || !t.ends_with('{') {
            continue;
        }
        let indent = line.len() - t.len();
        let close = format!("{}}}", " ".repeat(indent));
        for l in &lines[i..] {
            out.push_str(l);
            out.push('\n');
            if l.starts_with(&close) && l.len() - l.trim_start().len() == indent {
                break;
            }
        }
    }
    out
}

/// The type an `impl` line is for: `impl<..> Name<..> {` and `impl<..> Trait for Name<..> {`
/// both give `Name`.
fn impl_target(line: &str) -> Option<&str> {
    let mut rest = line.strip_prefix("impl")?.split('{').next()?;
    if rest.starts_with('<') {
        let mut depth = 0;
        let end = rest.char_indices().find_map(|(i, c)| {
            depth += match c {
                '<' => 1,
                '>' => -1,
                _ => 0,
            };
            (depth == 0).then_some(i + 1)
        })?;
        rest = &rest[end..];
    }
    let target = rest.rsplit_once(" for ").map_or(rest, |(_, t)| t);
    words(target).next()
}

/// Whether `code` defines `name`: an item (`fn`, `struct`, `enum`, `trait`, `type`, `const`,
/// `static`, `mod`), an import or re-export of it, or (with `members`) a variant or field.
fn defines(code: &str, name: &str, members: bool) -> bool {
    code.lines().any(|line| {
        let t = line.trim_start();
        let w: Vec<&str> = words(t).collect();
        let item = w.windows(2).any(|p| {
            matches!(
                p[0],
                "fn" | "struct" | "enum" | "trait" | "type" | "const" | "static" | "mod"
            ) && p[1] == name
        });
        let import = t.contains("use ") && w.contains(&name);
        let member = members
            && t.strip_prefix(name).is_some_and(|rest| {
                let rest = rest.trim_start();
                rest.is_empty() || rest.starts_with(['(', '{', ',', ':', '='])
            });
        item || import || member
    })
}

/// Every source file of the library and the command is named in ARCHITECTURE.md, and every
/// source file it names exists.
#[test]
fn architecture_names_every_source_file() {
    let named: BTreeSet<String> = code_spans(&read("ARCHITECTURE.md"))
        .into_iter()
        .filter(|s| (s.starts_with("src/") || s.starts_with("cli/src/")) && s.ends_with(".rs"))
        .collect();
    let present: BTreeSet<String> = files("src", ".rs")
        .into_iter()
        .chain(files("cli/src", ".rs"))
        .collect();
    let unnamed: Vec<_> = present.difference(&named).collect();
    let gone: Vec<_> = named.difference(&present).collect();
    assert!(
        unnamed.is_empty() && gone.is_empty(),
        "ARCHITECTURE.md does not name {unnamed:?}, and names {gone:?}, which do not exist"
    );
}

/// ARCHITECTURE.md's list of what each Unix platform module offers is what the shared Unix
/// code uses through `platform::`, with the `Watch`'s methods, and the fallback (`other.rs`,
/// built for every Unix without a module of its own) offers all of it.
#[test]
fn platform_modules_offer_the_documented_items() {
    let architecture = read("ARCHITECTURE.md");
    let paragraph = architecture
        .split("\n\n")
        .find(|p| p.starts_with("Each platform module"))
        .expect("ARCHITECTURE.md has a paragraph starting 'Each platform module'");
    let documented: BTreeSet<String> = code_spans(paragraph)
        .into_iter()
        .filter(|s| !s.ends_with(".rs") && s != "platform::NAME")
        .collect();

    let platform_files = [
        "linux.rs",
        "apple.rs",
        "freebsd.rs",
        "other.rs",
        "kqueue.rs",
    ];
    let mut used = BTreeSet::new();
    for file in files("src/sys/unix", ".rs") {
        if platform_files
            .iter()
            .any(|p| file.ends_with(&format!("/{p}")))
        {
            continue;
        }
        let code = code_of(&read(&file));
        for (i, _) in code.match_indices("platform::") {
            let name = words(&code[i + "platform::".len()..]).next().unwrap();
            used.insert(name.to_owned());
        }
    }
    let fallback = code_of(&read("src/sys/unix/other.rs"));
    let watch_impl = fallback
        .split("impl Watch {")
        .nth(1)
        .expect("other.rs has an `impl Watch`");
    let watch_impl = &watch_impl[..watch_impl.find("\n}").unwrap()];
    for (i, _) in watch_impl.match_indices("fn ") {
        let method = words(&watch_impl[i + 3..]).next().unwrap();
        used.insert(format!("Watch::{method}"));
    }
    assert_eq!(
        documented, used,
        "ARCHITECTURE.md's list of the platform modules' items (left) differs from what the \
         Unix code uses through `platform::` and `Watch`'s methods (right)"
    );
    let missing: Vec<_> = used
        .iter()
        .filter(|name| !name.contains("::") && !defines(&fallback, name, false))
        .collect();
    assert!(
        missing.is_empty(),
        "src/sys/unix/other.rs lacks {missing:?}"
    );
}

/// The documents' names of files (`src/...`) and of the crate's items (`Locks::new`,
/// `protocol::acquire`, clippy.toml's reasons) exist. A name whose first part is not the crate's
/// (`std::fs::rename`, `Duration::from_secs`) is not checked.
#[test]
fn documents_name_only_what_exists() {
    let mut documents: Vec<String> = vec!["README.md".into(), "ARCHITECTURE.md".into()];
    documents.extend(files("docs", ".md"));
    let mut names: Vec<(String, String)> = Vec::new();
    for doc in &documents {
        for span in code_spans(&read(doc)) {
            names.push((doc.clone(), span));
        }
    }
    for line in read("clippy.toml").lines() {
        if let Some((_, reason)) = line.split_once("reason = \"") {
            for token in reason.split([' ', '"', ',', '(', ')']) {
                names.push(("clippy.toml".into(), token.to_owned()));
            }
        }
    }

    let sources: Vec<String> = ["src", "cli/src", "tests", "cli/tests"]
        .into_iter()
        .flat_map(|d| files(d, ".rs"))
        .collect();
    let code: Vec<(String, String)> = sources
        .iter()
        .map(|f| (f.clone(), code_of(&read(f))))
        .collect();
    let all_code: String = code
        .iter()
        .map(|(_, c)| c.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    // A module's code: `src/**/NAME.rs` or `src/**/NAME/mod.rs`.
    let module = |name: &str| -> Option<String> {
        let found: Vec<&str> = code
            .iter()
            .filter(|(f, _)| {
                f.ends_with(&format!("/{name}.rs")) || f.ends_with(&format!("/{name}/mod.rs"))
            })
            .map(|(_, c)| c.as_str())
            .collect();
        (!found.is_empty()).then(|| found.join("\n"))
    };

    let mut wrong = Vec::new();
    for (doc, name) in &names {
        // `f(x)` names `f`; `src/a.rs:12` names `src/a.rs`.
        let name = name.split('(').next().unwrap_or_default();
        let name = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == ':');
        let path_like = [
            "src/",
            "tests/",
            "cli/",
            "benches/",
            "fuzz/",
            "docs/",
            ".ci/",
            "examples/",
        ]
        .iter()
        .any(|p| name.starts_with(p))
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c));
        if path_like {
            if !root().join(name).exists() {
                wrong.push(format!("{doc}: `{name}` (no such file)"));
            }
            continue;
        }
        let mut parts: Vec<&str> = name.split("::").collect();
        if parts.len() < 2 || !parts.iter().all(|p| is_ident(p)) {
            continue;
        }
        if parts
            .iter()
            .any(|p| p.len() > 1 && p.chars().all(|c| c.is_ascii_uppercase()))
        {
            continue; // a placeholder (`platform::NAME`)
        }
        if EXTERNAL.contains(&parts[0]) {
            continue; // another crate's
        }
        if matches!(parts[0], "crate" | "dirlock" | "self" | "super") {
            parts.remove(0);
        }
        // Walk the path: a module, then its items; a type, then its members.
        let mut scope = match module(parts[0]) {
            Some(m) => m,
            None if defines(&all_code, parts[0], false) => all_code.clone(),
            None => {
                wrong.push(format!("{doc}: `{name}` (no `{}` in the crate)", parts[0]));
                continue;
            }
        };
        for (i, part) in parts.iter().enumerate().skip(1) {
            let found = match module(parts[i - 1]) {
                Some(_) => defines(&scope, part, false),
                None => defines(&blocks_of(&all_code, parts[i - 1]), part, true),
            };
            if !found {
                wrong.push(format!("{doc}: `{name}` (no `{part}` there)"));
                break;
            }
            scope = module(part).unwrap_or_else(|| all_code.clone());
        }
    }
    assert!(
        wrong.is_empty(),
        "names of what does not exist:\n{}",
        wrong.join("\n")
    );
}

/// Every proptest regression file is the one a test reads: proptest looks for the failures of
/// `DIR/x/y.rs` in `proptest-regressions/x/y.txt` beside the `DIR` that holds `lib.rs` or
/// `main.rs` (`src/sim/tests.rs`: `proptest-regressions/sim/tests.txt`). A file anywhere
/// else replays nothing.
#[test]
fn every_proptest_regression_file_is_read() {
    let mut read_by_tests = BTreeSet::new();
    for dir in ["src", "tests", "cli/src", "cli/tests", "benches"] {
        for file in files(dir, ".rs") {
            if !read(&file).contains("proptest!") {
                continue;
            }
            let source = root().join(&file);
            let mut dir = source.clone();
            let mut regressions = source.with_extension("proptest-regressions");
            while dir.pop() && dir.starts_with(root()) {
                if dir.join("lib.rs").is_file() || dir.join("main.rs").is_file() {
                    let rel = source.strip_prefix(&dir).unwrap();
                    regressions = dir
                        .parent()
                        .unwrap()
                        .join("proptest-regressions")
                        .join(rel)
                        .with_extension("txt");
                    break;
                }
            }
            read_by_tests.insert(regressions);
        }
    }
    let orphans: Vec<String> = files("", ".txt")
        .into_iter()
        .chain(files("", ".proptest-regressions"))
        .filter(|f| f.contains("proptest-regressions"))
        .filter(|f| !read_by_tests.contains(&root().join(f)))
        .collect();
    assert!(
        orphans.is_empty(),
        "regression files no test reads (move their lines to the file of the test that \
         failed: {read_by_tests:?}): {orphans:?}"
    );
}

/// The README is the crate's front page on docs.rs too (`src/lib.rs` includes it): each of its
/// relative links is a reference (`[docs/limits.md]`) that `src/lib.rs` defines first, to the
/// repository, since a relative link leads nowhere on docs.rs.
#[test]
fn readme_links_work_on_docs_rs() {
    let readme = read("README.md");
    let lib = read("src/lib.rs");
    let mut wrong = Vec::new();
    for (i, _) in readme.match_indices("](") {
        let target = &readme[i + 2..];
        let target = &target[..target.find(')').unwrap_or(target.len())];
        if !target.contains("://") && !target.starts_with('#') {
            wrong.push(format!(
                "inline relative link ({target}): write it as a reference"
            ));
        }
    }
    for line in readme.lines() {
        let Some((label, target)) = line.strip_prefix('[').and_then(|l| l.split_once("]: ")) else {
            continue;
        };
        if target.contains("://") {
            continue;
        }
        if !root().join(target).exists() {
            wrong.push(format!("[{label}]: {target} does not exist"));
        }
        let on_docs_rs =
            format!("//! [{label}]: https://github.com/dirlock/dirlock/blob/main/{target}");
        if !lib.contains(&on_docs_rs) {
            wrong.push(format!("src/lib.rs lacks `{on_docs_rs}`"));
        }
    }
    assert!(wrong.is_empty(), "README links:\n{}", wrong.join("\n"));
}
