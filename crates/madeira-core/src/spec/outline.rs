//! A key-only outline of a YAML document, read leniently (any shape, duplicate keys
//! let through) after the strict read failed: it names the node an error sits in, the
//! key it belongs to, and both lines of a repeated key.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{DuplicateKeyPolicy, Options, Spanned};

use super::report::{At, Report, line_of};

/// A duplicate mapping key with the lines of both occurrences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Duplicate {
    pub key: String,
    pub first: Option<usize>,
    pub second: Option<usize>,
    /// A node id repeated in `nodes`.
    pub is_node: bool,
    /// The node whose body holds the repeated key.
    pub node: Option<String>,
}

impl Duplicate {
    pub(crate) fn report(&self, report: &mut Report) {
        let first = self.first.map(|l| format!(" (first at line {l})")).unwrap_or_default();
        let (node, message) = if self.is_node {
            let msg = format!("duplicate node id `{}`{first}; rename one of them", self.key);
            (Some(self.key.as_str()), msg)
        } else {
            let msg = format!("duplicate key `{}`{first}; keep only one", self.key);
            (self.node.as_deref(), msg)
        };
        report.push(At { node, line: self.second }, message);
    }
}

/// A key-only outline of a YAML document, read with duplicate keys allowed.
#[derive(Debug)]
pub(crate) struct Outline(Tree);

#[derive(Debug)]
enum Tree {
    Leaf,
    Seq(Vec<Tree>),
    Map(Vec<(Spanned<Key>, Tree)>),
}

/// A mapping key's text (`None` for a non-scalar key).
#[derive(Debug)]
struct Key(Option<String>);

impl Outline {
    pub(crate) fn read(source: &str, mut options: Options) -> Option<Self> {
        options.duplicate_keys = DuplicateKeyPolicy::PassThrough;
        serde_saphyr::from_str_with_options::<Tree>(source, options).ok().map(Outline)
    }

    /// Entries of the top-level `nodes` mapping.
    fn nodes(&self) -> Option<&[(Spanned<Key>, Tree)]> {
        let Tree::Map(top) = &self.0 else { return None };
        top.iter().find(|(k, _)| k.value.0.as_deref() == Some("nodes")).and_then(|(_, v)| match v {
            Tree::Map(entries) => Some(entries.as_slice()),
            _ => None,
        })
    }

    /// The node whose entry covers `line`: the last node key at or above it, as long
    /// as no later top-level key comes in between.
    pub(crate) fn node_at(&self, line: usize) -> Option<String> {
        let Tree::Map(top) = &self.0 else { return None };
        let nodes_line =
            top.iter().find(|(k, _)| k.value.0.as_deref() == Some("nodes")).and_then(|(k, _)| line_of(k))?;
        let end = top
            .iter()
            .filter_map(|(k, _)| line_of(k))
            .filter(|l| *l > nodes_line)
            .min()
            .unwrap_or(usize::MAX);
        if line >= end {
            return None;
        }
        self.nodes()?
            .iter()
            .filter_map(|(k, _)| Some((line_of(k)?, k.value.0.as_ref()?)))
            .filter(|(l, _)| *l <= line)
            .max_by_key(|(l, _)| *l)
            .map(|(_, name)| name.clone())
    }

    /// The key written last on `line` before `column`: the field a value error is about.
    pub(crate) fn key_before(&self, line: usize, column: usize) -> Option<String> {
        let mut best: Option<(usize, &str)> = None;
        visit_keys(&self.0, &mut |key| {
            let (Some(text), Some(l)) = (key.value.0.as_deref(), line_of(key)) else {
                return;
            };
            let c = usize::try_from(key.referenced.column()).unwrap_or(usize::MAX);
            if l == line && c < column && best.is_none_or(|(bc, _)| c > bc) {
                best = Some((c, text));
            }
        });
        best.map(|(_, k)| k.to_string())
    }

    /// Every repeated key in every mapping, in document order.
    pub(crate) fn duplicates(&self) -> Vec<Duplicate> {
        let mut found = Vec::new();
        let Tree::Map(top) = &self.0 else {
            collect_duplicates(&self.0, None, &mut found);
            return found;
        };
        collect_map_duplicates(top, None, false, &mut found);
        for (key, value) in top {
            if key.value.0.as_deref() == Some("nodes")
                && let Tree::Map(nodes) = value
            {
                collect_map_duplicates(nodes, None, true, &mut found);
                for (node, body) in nodes {
                    collect_duplicates(body, node.value.0.as_deref(), &mut found);
                }
            } else {
                collect_duplicates(value, None, &mut found);
            }
        }
        found
    }
}

fn visit_keys<'t>(tree: &'t Tree, f: &mut impl FnMut(&'t Spanned<Key>)) {
    match tree {
        Tree::Leaf => {}
        Tree::Seq(items) => items.iter().for_each(|t| visit_keys(t, f)),
        Tree::Map(entries) => {
            for (key, value) in entries {
                f(key);
                visit_keys(value, f);
            }
        }
    }
}

fn collect_duplicates(tree: &Tree, node: Option<&str>, found: &mut Vec<Duplicate>) {
    match tree {
        Tree::Leaf => {}
        Tree::Seq(items) => items.iter().for_each(|t| collect_duplicates(t, node, found)),
        Tree::Map(entries) => {
            collect_map_duplicates(entries, node, false, found);
            entries.iter().for_each(|(_, v)| collect_duplicates(v, node, found));
        }
    }
}

fn collect_map_duplicates(
    entries: &[(Spanned<Key>, Tree)],
    node: Option<&str>,
    is_node: bool,
    found: &mut Vec<Duplicate>,
) {
    for (i, (key, _)) in entries.iter().enumerate() {
        let Some(name) = key.value.0.as_deref() else {
            continue;
        };
        let earlier = entries[..i].iter().find(|(k, _)| k.value.0.as_deref() == Some(name));
        if let Some((first, _)) = earlier {
            found.push(Duplicate {
                key: name.to_string(),
                first: line_of(first),
                second: line_of(key),
                is_node,
                node: node.map(str::to_string),
            });
        }
    }
}

impl<'de> Deserialize<'de> for Tree {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TreeVisitor)
    }
}

struct TreeVisitor;

impl<'de> Visitor<'de> for TreeVisitor {
    type Value = Tree;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_i128<E: de::Error>(self, _: i128) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_u128<E: de::Error>(self, _: u128) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_none<E: de::Error>(self) -> Result<Tree, E> {
        Ok(Tree::Leaf)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Tree, D::Error> {
        Tree::deserialize(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Tree, D::Error> {
        Tree::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tree, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Tree::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tree, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<Key>>()? {
            entries.push((key, map.next_value()?));
        }
        Ok(Tree::Map(entries))
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a mapping key")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Key, E> {
        Ok(Key(Some(v.to_string())))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Key, E> {
        Ok(Key(Some(v.to_string())))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Key, E> {
        Ok(Key(Some(v.to_string())))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Key, E> {
        Ok(Key(Some(v.to_string())))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Key, E> {
        Ok(Key(Some(v.to_string())))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Key, E> {
        Ok(Key(Some(v.to_string())))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        Ok(Key(Some(v.to_string())))
    }
    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Key, E> {
        Ok(Key(None))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Key, E> {
        Ok(Key(Some("null".to_string())))
    }
    fn visit_none<E: de::Error>(self) -> Result<Key, E> {
        Ok(Key(Some("null".to_string())))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        Key::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Key, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Key(None))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Key, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Key(None))
    }
}
