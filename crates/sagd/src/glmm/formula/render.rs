//! A formula written back in lme4's notation, from what was read: the terms after `a*b` and
//! `g/h` were expanded, each name quoted in backticks where the reader needs them. Read again,
//! it is the same formula.

use std::fmt;

use super::*;

/// `name`, in backticks unless the reader takes it as one name as it is.
fn quoted(name: &str) -> String {
    let mut chars = name.chars();
    let plain = chars
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '.' || c == '_')
        && chars.all(|c| c.is_alphanumeric() || matches!(c, '.' | '_'));
    match plain {
        true => name.to_string(),
        false => format!("`{name}`"),
    }
}

/// A term's variables joined by `:`, each as written (`factor(x)` where the formula said so).
fn term(vars: &[Var]) -> String {
    (vars.iter())
        .map(|v| match v.factor {
            true => format!("factor({})", quoted(&v.name)),
            false => quoted(&v.name),
        })
        .collect::<Vec<_>>()
        .join(":")
}

/// A right-hand side's parts: `0` first without the intercept, `1` with it where `one` asks or
/// no term follows, then the terms.
fn parts(effects: &Effects, one: bool) -> Vec<String> {
    let first = match (effects.intercept, one || effects.terms.is_empty()) {
        (false, _) => Some("0"),
        (true, true) => Some("1"),
        (true, false) => None,
    };
    (first.map(str::to_string).into_iter())
        .chain(effects.terms.iter().map(|t| term(t)))
        .collect()
}

impl fmt::Display for Formula {
    /// The formula in lme4's notation: `y ~ x + A + x:A + offset(log(t)) + (1 + x | g)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let response = match &self.response {
            Response::Column(y) => quoted(y),
            Response::Cbind(s, n) => format!("cbind({}, {})", quoted(s), quoted(n)),
        };
        let mut rhs = parts(&self.fixed, false);
        rhs.extend(self.offsets.iter().map(|o| match o.log {
            true => format!("offset(log({}))", quoted(&o.column)),
            false => format!("offset({})", quoted(&o.column)),
        }));
        for bar in &self.random {
            let group: Vec<String> = bar.group.iter().map(|g| quoted(g)).collect();
            // One effect has no correlation to leave out: `(1 || g)` is `(1 | g)`.
            let count = bar.effects.terms.len() + usize::from(bar.effects.intercept);
            let bars = if bar.correlated || count < 2 {
                "|"
            } else {
                "||"
            };
            let effects = parts(&bar.effects, true).join(" + ");
            rhs.push(format!("({effects} {bars} {})", group.join(":")));
        }
        write!(f, "{response} ~ {}", rhs.join(" + "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each formula written back reads as itself, and `a*b`, `g/h` and `||` come back expanded.
    #[test]
    fn a_formula_written_back_reads_as_itself() {
        for text in [
            "y ~ x * A + (1 | g)",
            "cbind(s, f) ~ 0 + x + factor(d) + offset(log(t)) + (1 + x || g/h)",
            "`my y` ~ `a b`:x + (0 + x | g:h) + (1 | h)",
            "y ~ 1 + (1 | g)",
        ] {
            let f = Formula::parse(text).unwrap();
            let written = f.to_string();
            let again = Formula::parse(&written).unwrap();
            let same = |a: &Formula, b: &Formula| {
                (a.response == b.response && a.fixed == b.fixed)
                    && (a.random == b.random && a.offsets == b.offsets)
            };
            assert!(same(&f, &again), "{text} -> {written}");
        }
        let f = Formula::parse("y ~ x * A + (1 + x || g)").unwrap();
        assert_eq!(f.to_string(), "y ~ x + A + x:A + (1 + x || g)");
        let f = Formula::parse("y ~ 0 + x + (1 || g) + (0 + x || h)").unwrap();
        assert_eq!(f.to_string(), "y ~ 0 + x + (1 | g) + (0 + x | h)");
    }
}
