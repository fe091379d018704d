//! The public API's snapshot: every documented public item of `sagd` with its signature, read
//! from the sources, compared with `public-api.txt` beside Cargo.toml. A change to the API then
//! shows in review as a change to that file. After a deliberate change:
//! `SAGD_BLESS_API=1 cargo test --release -p sagd --test public_api`.
//!
//! Items marked `#[doc(hidden)]` are the workspace's own plumbing (shared by `sagd-nn`,
//! `sagd-apps`, the CLI and the bindings) and carry no promise; they are counted apart.

use quote::ToTokens;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::{Attribute, Item, UseTree, Visibility};

/// One module of the crate: its items, read from its file or from its inline body.
struct Module {
    items: Vec<Item>,
}

/// Every module of the crate by path ("" is the root, "em::information" …).
struct Crate {
    modules: BTreeMap<String, Module>,
}

fn has_attr(attrs: &[Attribute], name: &str, inner: Option<&str>) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident(name)
            && inner.is_none_or(|w| a.meta.to_token_stream().to_string().contains(w))
    })
}

fn hidden(attrs: &[Attribute]) -> bool {
    has_attr(attrs, "doc", Some("hidden"))
}

fn test_only(attrs: &[Attribute]) -> bool {
    has_attr(attrs, "cfg", Some("test"))
}

fn join(module: &str, name: &str) -> String {
    if module.is_empty() {
        name.to_string()
    } else {
        format!("{module}::{name}")
    }
}

fn parent(module: &str) -> String {
    module
        .rsplit_once("::")
        .map(|(p, _)| p.to_string())
        .unwrap_or_default()
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut crate_ = Crate {
            modules: BTreeMap::new(),
        };
        crate_.load(String::new(), &src.join("lib.rs"), src.to_path_buf());
        crate_
    }

    fn load(&mut self, path: String, file: &Path, dir: PathBuf) {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        self.add(path, parsed.items, dir);
    }

    fn add(&mut self, path: String, items: Vec<Item>, dir: PathBuf) {
        for item in &items {
            let Item::Mod(m) = item else { continue };
            if test_only(&m.attrs) {
                continue;
            }
            let child = join(&path, &m.ident.to_string());
            let sub = dir.join(m.ident.to_string());
            match &m.content {
                Some((_, inline)) => self.add(child, inline.clone(), sub),
                None => {
                    let flat = dir.join(format!("{}.rs", m.ident));
                    if flat.exists() {
                        self.load(child, &flat, sub);
                    } else {
                        self.load(child, &sub.join("mod.rs"), sub);
                    }
                }
            }
        }
        self.modules.insert(path, Module { items });
    }

    /// The definition a path names from `module`, following re-exports: (module, item).
    fn resolve(&self, module: &str, segments: &[String]) -> Option<(String, &Item)> {
        let mut at = module.to_string();
        let (last, walk) = segments.split_last()?;
        for (i, s) in walk.iter().enumerate() {
            at = match s.as_str() {
                "crate" if i == 0 => String::new(),
                "self" => at,
                "super" => parent(&at),
                name => {
                    let next = join(&at, name);
                    if self.modules.contains_key(&next) {
                        next
                    } else {
                        // A module brought in by `use`, or another crate's.
                        let (m, item) = self.resolve(&at, std::slice::from_ref(&s.to_string()))?;
                        let Item::Mod(md) = item else { return None };
                        join(&m, &md.ident.to_string())
                    }
                }
            };
        }
        let items = &self.modules.get(&at)?.items;
        for item in items {
            if item_name(item).as_deref() == Some(last.as_str()) && !matches!(item, Item::Use(_)) {
                return Some((at.clone(), item));
            }
        }
        for item in items {
            let Item::Use(u) = item else { continue };
            for (name, target) in use_leaves(&u.tree, Vec::new()) {
                if name == *last {
                    return self.resolve(&at, &target);
                }
            }
        }
        None
    }

    /// Inherent `pub fn`s and trait impls of the type named `ty`, from every module.
    fn impls_of(&self, ty: &str) -> (Vec<String>, BTreeSet<String>) {
        let mut methods = Vec::new();
        let mut traits = BTreeSet::new();
        for module in self.modules.values() {
            for item in &module.items {
                let Item::Impl(im) = item else { continue };
                if test_only(&im.attrs) || self_name(&im.self_ty).as_deref() != Some(ty) {
                    continue;
                }
                match &im.trait_ {
                    Some((_, t, _)) => {
                        traits.insert(tidy(&t.to_token_stream()));
                    }
                    None => {
                        for it in &im.items {
                            let syn::ImplItem::Fn(f) = it else { continue };
                            if matches!(f.vis, Visibility::Public(_)) && !hidden(&f.attrs) {
                                methods.push(format!(
                                    "{}{}",
                                    deprecated(&f.attrs),
                                    tidy(&f.sig.to_token_stream())
                                ));
                            }
                        }
                    }
                }
            }
        }
        methods.sort();
        (methods, traits)
    }
}

fn self_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

fn item_name(item: &Item) -> Option<String> {
    Some(
        match item {
            Item::Const(i) => &i.ident,
            Item::Enum(i) => &i.ident,
            Item::Fn(i) => &i.sig.ident,
            Item::Mod(i) => &i.ident,
            Item::Static(i) => &i.ident,
            Item::Struct(i) => &i.ident,
            Item::Trait(i) => &i.ident,
            Item::Type(i) => &i.ident,
            Item::Union(i) => &i.ident,
            Item::Macro(i) => i.ident.as_ref()?,
            _ => return None,
        }
        .to_string(),
    )
}

fn attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

fn public(item: &Item) -> bool {
    let vis = match item {
        Item::Const(i) => &i.vis,
        Item::Enum(i) => &i.vis,
        Item::Fn(i) => &i.vis,
        Item::Mod(i) => &i.vis,
        Item::Static(i) => &i.vis,
        Item::Struct(i) => &i.vis,
        Item::Trait(i) => &i.vis,
        Item::Type(i) => &i.vis,
        Item::Union(i) => &i.vis,
        Item::Use(i) => &i.vis,
        Item::Macro(i) => return has_attr(&i.attrs, "macro_export", None),
        _ => return false,
    };
    matches!(vis, Visibility::Public(_))
}

/// (name it is bound to, path it names) for each leaf of a `use` tree.
fn use_leaves(tree: &UseTree, prefix: Vec<String>) -> Vec<(String, Vec<String>)> {
    let with = |s: String| {
        let mut p = prefix.clone();
        p.push(s);
        p
    };
    match tree {
        UseTree::Path(p) => use_leaves(&p.tree, with(p.ident.to_string())),
        UseTree::Name(n) => vec![(n.ident.to_string(), with(n.ident.to_string()))],
        UseTree::Rename(r) => vec![(r.rename.to_string(), with(r.ident.to_string()))],
        UseTree::Group(g) => g
            .items
            .iter()
            .flat_map(|t| use_leaves(t, prefix.clone()))
            .collect(),
        UseTree::Glob(_) => vec![("*".to_string(), with("*".to_string()))],
    }
}

/// Tokens as a person would write them: `&[T]`, not `& [T]`.
fn tidy(tokens: &proc_macro2::TokenStream) -> String {
    let mut s = tokens.to_string();
    for (from, to) in [
        (" ,", ","),
        (",)", ")"),
        (", }", " }"),
        ("? ", "?"),
        (" ;", ";"),
        ("( ", "("),
        (" )", ")"),
        ("[ ", "["),
        (" ]", "]"),
        (" :: ", "::"),
        (":: ", "::"),
        (" : ", ": "),
        ("& ", "&"),
        (" <", "<"),
        ("< ", "<"),
        (" >", ">"),
        ("> (", ">("),
        (" (", "("),
        ("# [", "#["),
        ("! [", "!["),
    ] {
        while s.contains(from) {
            s = s.replace(from, to);
        }
    }
    // `->`, `=>` and `impl Fn(…) -> …` keep their spaces.
    s.replace("->", " -> ")
        .replace("  ", " ")
        .replace("=>", " => ")
        .replace("  ", " ")
}

fn deprecated(attrs: &[Attribute]) -> &'static str {
    if has_attr(attrs, "deprecated", None) {
        "(deprecated) "
    } else {
        ""
    }
}

fn cfg(attrs: &[Attribute]) -> String {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg"))
        .map(|a| format!("#[{}] ", tidy(&a.meta.to_token_stream())))
        .collect()
}

fn derives(attrs: &[Attribute]) -> Vec<String> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("derive"))
        .flat_map(|a| {
            let text = tidy(&a.meta.to_token_stream());
            let inner = text.trim_start_matches("derive(").trim_end_matches(')');
            inner
                .split(',')
                .map(|s| s.trim().to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `kind Name<generics> where …`.
fn head(kind: &str, name: &dyn ToTokens, generics: &syn::Generics) -> String {
    let w = generics
        .where_clause
        .as_ref()
        .map(|w| format!(" {}", tidy(&w.to_token_stream())))
        .unwrap_or_default();
    format!(
        "{kind} {}{}{w}",
        tidy(&name.to_token_stream()),
        tidy(&generics.to_token_stream())
    )
}

/// A struct's public fields, and whether it has others.
fn struct_parts(s: &syn::ItemStruct) -> Vec<String> {
    let mut parts = Vec::new();
    for f in &s.fields {
        if matches!(f.vis, Visibility::Public(_)) && !hidden(&f.attrs) {
            let name = f
                .ident
                .as_ref()
                .map(|i| format!("{i}: "))
                .unwrap_or_default();
            parts.push(format!("field {name}{}", tidy(&f.ty.to_token_stream())));
        }
    }
    if s.fields
        .iter()
        .any(|f| !matches!(f.vis, Visibility::Public(_)))
    {
        parts.push("(private fields)".into());
    }
    parts
}

/// An enum's variants with their fields (their docs left out).
fn enum_parts(e: &syn::ItemEnum) -> Vec<String> {
    let mut parts = Vec::new();
    if has_attr(&e.attrs, "non_exhaustive", None) {
        parts.push("#[non_exhaustive]".into());
    }
    for v in &e.variants {
        let mut fields = v.fields.clone();
        fields.iter_mut().for_each(|f| f.attrs.clear());
        parts.push(format!(
            "variant {}{}",
            v.ident,
            tidy(&fields.to_token_stream())
        ));
    }
    parts
}

/// A trait's items, each marked required or provided.
fn trait_parts(t: &syn::ItemTrait) -> Vec<String> {
    let mut parts = Vec::new();
    for it in &t.items {
        let (text, provided) = match it {
            syn::TraitItem::Fn(f) => (tidy(&f.sig.to_token_stream()), f.default.is_some()),
            syn::TraitItem::Type(ty) => (
                format!("type {}{}", ty.ident, tidy(&ty.bounds.to_token_stream())),
                ty.default.is_some(),
            ),
            syn::TraitItem::Const(c) => (
                format!("const {}: {}", c.ident, tidy(&c.ty.to_token_stream())),
                c.default.is_some(),
            ),
            _ => continue,
        };
        let kind = if provided { "provided" } else { "required" };
        parts.push(format!("{kind} {text}"));
    }
    parts
}

/// The item's line and the lines of its parts (fields, variants, methods, impls).
fn describe(crate_: &Crate, item: &Item) -> (String, Vec<String>) {
    let mut parts = Vec::new();
    let line = match item {
        Item::Const(c) => format!("const {}: {}", c.ident, tidy(&c.ty.to_token_stream())),
        Item::Static(s) => format!("static {}: {}", s.ident, tidy(&s.ty.to_token_stream())),
        Item::Fn(f) => tidy(&f.sig.to_token_stream()),
        Item::Type(t) => format!(
            "type {}{} = {}",
            t.ident,
            tidy(&t.generics.to_token_stream()),
            tidy(&t.ty.to_token_stream())
        ),
        Item::Macro(m) => format!(
            "macro {}!",
            m.ident.as_ref().map(|i| i.to_string()).unwrap_or_default()
        ),
        Item::Mod(m) => format!("mod {}", m.ident),
        Item::Struct(s) => {
            parts = struct_parts(s);
            head("struct", &s.ident, &s.generics)
        }
        Item::Union(u) => head("union", &u.ident, &u.generics),
        Item::Enum(e) => {
            parts = enum_parts(e);
            head("enum", &e.ident, &e.generics)
        }
        Item::Trait(t) => {
            parts = trait_parts(t);
            let supers = if t.supertraits.is_empty() {
                String::new()
            } else {
                format!(": {}", tidy(&t.supertraits.to_token_stream()))
            };
            format!("{}{supers}", head("trait", &t.ident, &t.generics))
        }
        _ => String::new(),
    };
    if let Some(name) = item_name(item) {
        if matches!(item, Item::Struct(_) | Item::Enum(_) | Item::Union(_)) {
            let (methods, traits) = crate_.impls_of(&name);
            parts.extend(methods.into_iter().map(|m| format!("method {m}")));
            let mut all: BTreeSet<String> = traits;
            all.extend(derives(attrs(item)));
            parts.extend(all.into_iter().map(|t| format!("impl {t}")));
        }
    }
    (
        format!("{}{}{line}", cfg(attrs(item)), deprecated(attrs(item))),
        parts,
    )
}

/// The listing's lines, and the numbers of documented and hidden items.
fn listing(crate_: &Crate) -> (Vec<String>, usize, usize) {
    let mut lines = Vec::new();
    let mut defined = BTreeSet::new();
    let mut hidden_items = BTreeSet::new();
    let mut queue = vec![String::new()];
    // First the items at their own paths, then what `pub use` names elsewhere.
    let mut reexports = Vec::new();
    while let Some(module) = queue.pop() {
        for item in &crate_.modules[&module].items {
            if !public(item) || test_only(attrs(item)) {
                continue;
            }
            if let Item::Use(u) = item {
                for (name, target) in use_leaves(&u.tree, Vec::new()) {
                    reexports.push((module.clone(), name, target, hidden(&u.attrs)));
                }
                continue;
            }
            let Some(name) = item_name(item) else {
                continue;
            };
            let module = if let Item::Macro(_) = item {
                String::new()
            } else {
                module.clone()
            };
            let key = join(&module, &name);
            if hidden(attrs(item)) {
                hidden_items.insert(key);
                continue;
            }
            defined.insert(key.clone());
            let (line, parts) = describe(crate_, item);
            lines.push((format!("sagd::{key}"), line, parts));
            if let Item::Mod(_) = item {
                queue.push(key);
            }
        }
    }
    // A re-export counts once per definition, wherever it is named. An item defined out of sight
    // (in a private or hidden module) is described at the first of its public paths, the
    // prelude's last; every other name of it points there.
    let mut documented: BTreeMap<String, String> = defined
        .iter()
        .map(|k| (k.clone(), format!("sagd::{k}")))
        .collect();
    let mut named = Vec::new();
    for (module, name, target, is_hidden) in reexports {
        let at = format!("sagd::{}", join(&module, &name));
        let Some((def_module, item)) = crate_.resolve(&module, &target) else {
            let line = format!("use {} (another crate's)", target.join("::"));
            lines.push((at, line, vec![]));
            continue;
        };
        let key = join(&def_module, &item_name(item).unwrap_or_default());
        if is_hidden || hidden(attrs(item)) {
            hidden_items.insert(key);
            continue;
        }
        named.push((at, key, item, module == "prelude"));
    }
    named.sort_by(|x, y| (x.3, &x.0).cmp(&(y.3, &y.0)));
    for (at, key, item, _) in named {
        let home = documented.entry(key.clone()).or_insert_with(|| at.clone());
        if *home == at {
            defined.insert(key);
            let (line, parts) = describe(crate_, item);
            lines.push((at, line, parts));
        } else {
            lines.push((at, format!("use {home}"), vec![]));
        }
    }
    lines.sort();
    let text = lines
        .into_iter()
        .flat_map(|(path, line, parts)| {
            std::iter::once(format!("{path}: {line}"))
                .chain(parts.into_iter().map(|p| format!("    {p}")))
        })
        .collect();
    let hidden_count = hidden_items.difference(&defined).count();
    (text, defined.len(), hidden_count)
}

#[test]
fn the_public_api_is_the_snapshot() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crate_ = Crate::read(&root.join("src"));
    let (lines, documented, hidden) = listing(&crate_);
    let now = format!(
        "# sagd's public API: {documented} documented items (the prelude's names and other \
         re-exports of an item counted once; methods, fields and variants within their item), \
         and {hidden} hidden for the workspace's own crates.\n\
         # Regenerate after a deliberate change: \
         SAGD_BLESS_API=1 cargo test --release -p sagd --test public_api\n{}\n",
        lines.join("\n")
    );
    let file = root.join("public-api.txt");
    if std::env::var_os("SAGD_BLESS_API").is_some() {
        std::fs::write(&file, &now).expect("write public-api.txt");
        return;
    }
    let before = std::fs::read_to_string(&file).unwrap_or_default();
    if before != now {
        let old: BTreeSet<&str> = before.lines().collect();
        let new: BTreeSet<&str> = now.lines().collect();
        let gone: Vec<_> = old.difference(&new).map(|l| format!("- {l}")).collect();
        let came: Vec<_> = new.difference(&old).map(|l| format!("+ {l}")).collect();
        panic!(
            "sagd's public API changed against crates/sagd/public-api.txt:\n{}\n{}\n\
             If the change is deliberate (and, for a removal or a changed signature, deprecated \
             for a release first and written in CHANGELOG.md), regenerate the file with \
             SAGD_BLESS_API=1 cargo test --release -p sagd --test public_api",
            gone.join("\n"),
            came.join("\n")
        );
    }
}
