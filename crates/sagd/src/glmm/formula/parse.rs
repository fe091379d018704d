//! Reading a formula's text: tokens, then a recursive-descent reader of lme4's notation into
//! [`Formula`]'s terms.

use super::{same_term, Bar, Effects, Formula, Offset, Response, Var};
use crate::error::invalid;
use crate::error::{Result, SagdError};

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Name(String),
    Number(String),
    Sym(&'static str),
}

fn tokens(text: &str) -> Result<Vec<(Token, usize)>> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at = i + 1;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_alphabetic() || c == '.' || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || matches!(chars[i], '.' | '_')) {
                i += 1;
            }
            out.push((Token::Name(chars[start..i].iter().collect()), at));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            out.push((Token::Number(chars[start..i].iter().collect()), at));
        } else if c == '`' {
            let end = chars[i + 1..]
                .iter()
                .position(|&c| c == '`')
                .ok_or_else(|| {
                    invalid(
                        "formula",
                        format!("`{text}`: the backtick at character {at} is not closed"),
                        "close the quoted name with a second backtick",
                    )
                })?;
            out.push((Token::Name(chars[i + 1..i + 1 + end].iter().collect()), at));
            i += end + 2;
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            let sym = if two == "||" {
                "||"
            } else {
                match c {
                    '~' => "~",
                    '+' => "+",
                    '-' => "-",
                    '*' => "*",
                    ':' => ":",
                    '/' => "/",
                    '(' => "(",
                    ')' => ")",
                    '|' => "|",
                    ',' => ",",
                    _ => {
                        return Err(invalid(
                            "formula",
                            format!("`{text}`: `{c}` at character {at}"),
                            "write terms joined by +, interactions with : or *, random effects as (x | g); for a transformed variable (log, ^, I(…)) add a column to the data",
                        ))
                    }
                }
            };
            i += sym.len();
            out.push((Token::Sym(sym), at));
        }
    }
    Ok(out)
}

/// A recursive-descent reader over the tokens.
struct Reader<'a> {
    text: &'a str,
    tokens: Vec<(Token, usize)>,
    at: usize,
}

/// A term of a sum as read: its variables, or an intercept marker.
enum Item {
    Terms(Vec<Vec<Var>>),
    One,
    Zero,
    Bar(Vec<Bar>),
    Offset(Offset),
}

/// A sum as read: the effects, the random-effect terms and the offsets.
struct Sum {
    effects: Effects,
    random: Vec<Bar>,
    offsets: Vec<Offset>,
}

impl Reader<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at).map(|(t, _)| t)
    }

    fn error(&self, what: &str, fix: &str) -> SagdError {
        let place = match self.tokens.get(self.at) {
            Some((_, c)) => format!("at character {c}"),
            None => "at the end".to_string(),
        };
        invalid("formula", format!("`{}`: {what} {place}", self.text), fix)
    }

    fn eat(&mut self, sym: &'static str) -> bool {
        if self.peek() == Some(&Token::Sym(sym)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, sym: &'static str) -> Result<()> {
        if self.eat(sym) {
            Ok(())
        } else {
            Err(self.error(&format!("expected `{sym}`"), "check the formula's brackets"))
        }
    }

    fn name(&mut self) -> Result<String> {
        match self.peek().cloned() {
            Some(Token::Name(n)) => {
                self.at += 1;
                Ok(n)
            }
            _ => Err(self.error("expected a column name", "name a column of the data")),
        }
    }

    /// A variable: a name, or `factor(name)`.
    fn var(&mut self) -> Result<Var> {
        let name = self.name()?;
        if !self.eat("(") {
            return Ok(Var {
                name,
                factor: false,
            });
        }
        if name != "factor" {
            self.at -= 2;
            return Err(self.error(
                &format!("the function `{name}(…)`"),
                "only factor(…) and, among the fixed effects, offset(…) are read in a formula: add the transformed variable to the data as a column",
            ));
        }
        let inner = self.name()?;
        self.expect(")")?;
        Ok(Var {
            name: inner,
            factor: true,
        })
    }

    /// An interaction `a:b:c`.
    fn interaction(&mut self) -> Result<Vec<Var>> {
        let mut vars = vec![self.var()?];
        while self.eat(":") {
            vars.push(self.var()?);
        }
        Ok(vars)
    }

    /// A crossing `a*b` of interactions: every union of a non-empty subset of them.
    fn crossing(&mut self) -> Result<Vec<Vec<Var>>> {
        let mut terms: Vec<Vec<Var>> = vec![self.interaction()?];
        while self.eat("*") {
            let next = self.interaction()?;
            let mut more = terms.clone();
            more.push(next.clone());
            for t in &terms {
                let mut joined = t.clone();
                joined.extend(next.iter().cloned());
                more.push(joined);
            }
            terms = more;
        }
        Ok(terms)
    }

    /// `offset(x)` or `offset(log(x))`, its name already read.
    fn offset(&mut self) -> Result<Offset> {
        self.expect("(")?;
        let name = self.name()?;
        let offset = if self.eat("(") {
            if name != "log" {
                self.at -= 2;
                return Err(self.error(
                    &format!("the function `{name}(…)` inside offset(…)"),
                    "write offset(x) or offset(log(x)); for another transformation add it to the data as a column",
                ));
            }
            let column = self.name()?;
            self.expect(")")?;
            Offset { column, log: true }
        } else {
            Offset {
                column: name,
                log: false,
            }
        };
        self.expect(")")?;
        Ok(offset)
    }

    fn item(&mut self, bars: bool) -> Result<Item> {
        let next_is_call = matches!(self.tokens.get(self.at + 1), Some((Token::Sym("("), _)));
        match self.peek().cloned() {
            Some(Token::Name(n)) if n == "offset" && next_is_call => {
                if !bars {
                    return Err(self.error(
                        "offset(…) inside a random-effect term",
                        "write the offset among the fixed effects: y ~ x + offset(log(t)) + (1 | g)",
                    ));
                }
                self.at += 1;
                Ok(Item::Offset(self.offset()?))
            }
            Some(Token::Number(n)) if n == "1" || n == "0" => {
                self.at += 1;
                Ok(if n == "1" { Item::One } else { Item::Zero })
            }
            Some(Token::Number(_)) => Err(self.error(
                "a number",
                "only 1 (an intercept) and 0 (none) are numbers in a formula",
            )),
            Some(Token::Sym("(")) if bars => {
                self.at += 1;
                let effects = self.sum(false)?;
                let correlated = if self.eat("||") {
                    false
                } else if self.eat("|") {
                    true
                } else {
                    return Err(self.error(
                        "a bracket without `|`",
                        "brackets in a formula hold random effects, (x | g); expand products of sums by hand",
                    ));
                };
                let mut groups = vec![self.interaction()?];
                while self.eat("/") {
                    let mut inner = groups.last().cloned().unwrap_or_default();
                    inner.extend(self.interaction()?);
                    groups.push(inner);
                }
                self.expect(")")?;
                Ok(Item::Bar(
                    groups
                        .into_iter()
                        .map(|g| Bar {
                            effects: effects.clone(),
                            group: g.into_iter().map(|v| v.name).collect(),
                            correlated,
                        })
                        .collect(),
                ))
            }
            Some(Token::Sym("(")) => Err(self.error(
                "brackets inside a random-effect term",
                "write the effects as a sum of columns, (1 + x | g)",
            )),
            _ => Ok(Item::Terms(self.crossing()?)),
        }
    }

    /// A sum of items; with `bars`, random-effect terms go to `self`'s caller through the
    /// returned list.
    fn sum_with(&mut self, bars: bool) -> Result<Sum> {
        let mut intercept = true;
        let mut terms: Vec<Vec<Var>> = Vec::new();
        let mut random = Vec::new();
        let mut offsets = Vec::new();
        let mut minus = self.eat("-");
        loop {
            let at = self.at;
            match self.item(bars)? {
                Item::Offset(_) if minus => {
                    self.at = at;
                    return Err(self.error(
                        "an offset removed with `-`",
                        "leave the offset out instead, or add it with +",
                    ));
                }
                // The same offset twice is one, as R keeps one of each variable.
                Item::Offset(o) if offsets.contains(&o) => {}
                Item::Offset(o) => offsets.push(o),
                Item::One => intercept = !minus,
                Item::Zero if !minus => intercept = false,
                Item::Zero => {}
                Item::Terms(_) if minus => {
                    self.at -= 1;
                    return Err(self.error(
                        "a term removed with `-`",
                        "leave the term out instead; `- 1` (no intercept) is the only removal read",
                    ));
                }
                Item::Terms(ts) => {
                    for t in ts {
                        let mut once: Vec<Var> = Vec::with_capacity(t.len());
                        for v in t {
                            if !once.contains(&v) {
                                once.push(v);
                            }
                        }
                        if !terms.iter().any(|u| same_term(u, &once)) {
                            terms.push(once);
                        }
                    }
                }
                Item::Bar(b) => random.extend(b),
            }
            if self.eat("+") {
                minus = false;
            } else if self.eat("-") {
                minus = true;
            } else {
                break;
            }
        }
        // R orders a term's variables by their first appearance in the formula, and the terms by
        // degree, keeping their order within a degree.
        let mut seen: Vec<Var> = Vec::new();
        for v in terms.iter().flatten() {
            if !seen.contains(v) {
                seen.push(v.clone());
            }
        }
        for t in &mut terms {
            t.sort_by_key(|v| seen.iter().position(|s| s == v));
        }
        terms.sort_by_key(Vec::len);
        Ok(Sum {
            effects: Effects { intercept, terms },
            random,
            offsets,
        })
    }

    fn sum(&mut self, bars: bool) -> Result<Effects> {
        Ok(self.sum_with(bars)?.effects)
    }
}

impl Formula {
    /// Reads a formula. Errors quote it and say where it went wrong.
    pub fn parse(text: &str) -> Result<Formula> {
        let mut r = Reader {
            text,
            tokens: tokens(text)?,
            at: 0,
        };
        let response = match r.peek().cloned() {
            Some(Token::Name(n)) if n == "cbind" => {
                r.at += 1;
                r.expect("(")?;
                let s = r.name()?;
                r.expect(",")?;
                let f = r.name()?;
                r.expect(")")?;
                Response::Cbind(s, f)
            }
            Some(Token::Name(_)) => Response::Column(r.name()?),
            _ => {
                return Err(r.error(
                    "expected the response's column",
                    "write the formula as `y ~ x + (1 | g)`",
                ))
            }
        };
        r.expect("~")?;
        let Sum {
            effects: fixed,
            random,
            offsets,
        } = r.sum_with(true)?;
        if r.at < r.tokens.len() {
            return Err(r.error("unexpected text", "join terms with +"));
        }
        if random.is_empty() {
            return Err(invalid(
                "formula",
                format!("`{text}` has no random-effect term"),
                "add one such as (1 | g); without random effects the model is a GLM",
            ));
        }
        for b in &random {
            if !b.effects.intercept && b.effects.terms.is_empty() {
                return Err(invalid(
                    "formula",
                    format!("`{text}`: a random-effect term with no effects"),
                    "give it an intercept or a column, (1 | g) or (0 + x | g)",
                ));
            }
        }
        Ok(Formula {
            text: text.to_string(),
            response,
            fixed,
            random,
            offsets,
        })
    }
}
