//! The formula reader and R's coding against hand-worked designs.

use super::*;

pub(super) fn frame() -> Frame {
    let text = |v: &[&str]| Column::Text(v.iter().map(|s| Some(s.to_string())).collect());
    Frame::new(
        vec!["y".into(), "x".into(), "f".into(), "g".into(), "h".into()],
        vec![
            Column::Number(vec![1.0, 0.0, 3.0, 2.0, 5.0, f64::NAN]),
            Column::Number(vec![0.5, 1.0, 1.5, 2.0, 2.5, 3.0]),
            text(&["b", "a", "c", "a", "b", "c"]),
            Column::Number(vec![10.0, 2.0, 10.0, 2.0, 10.0, 2.0]),
            text(&["u", "u", "v", "v", "w", "w"]),
        ],
    )
    .unwrap()
}

fn column(d: &Design, j: usize) -> Vec<f64> {
    let p = d.x_names.len();
    (0..d.n_obs).map(|i| d.x[i * p + j]).collect()
}

#[test]
fn r_names_and_codes_the_columns() {
    let d = Formula::parse("y ~ x * f + (1 + x | g)")
        .unwrap()
        .design(&frame())
        .unwrap();
    assert_eq!(d.x_names, ["(Intercept)", "x", "fb", "fc", "x:fb", "x:fc"]);
    assert_eq!(d.dropped, 1);
    assert_eq!(d.n_obs, 5);
    assert_eq!(column(&d, 2), [1.0, 0.0, 0.0, 0.0, 1.0]);
    assert_eq!(column(&d, 4), [0.5, 0.0, 0.0, 0.0, 2.5]);
    let t = &d.term_names[0];
    assert_eq!(t.effects, ["(Intercept)", "x"]);
    // Numeric groups sort by value: 2 before 10.
    assert_eq!(t.levels, ["2", "10"]);
    assert_eq!(d.terms[0].group, [1, 0, 1, 0, 1]);
    assert!(d.terms[0].correlated);
}

#[test]
fn indicators_where_the_margin_is_absent() {
    // Without an intercept, f's margin (the empty term) is absent: one indicator per level;
    // so is x:g's margin x.
    let d = Formula::parse("y ~ 0 + f + x:factor(g) + (0 + x || h)")
        .unwrap()
        .design(&frame())
        .unwrap();
    assert_eq!(
        d.x_names,
        ["fa", "fb", "fc", "x:factor(g)2", "x:factor(g)10"]
    );
    assert!(!d.terms[0].correlated);
    assert_eq!(d.term_names[0].effects, ["x"]);
}

#[test]
fn nesting_crossing_and_cbind() {
    let f = Formula::parse("cbind(y, x) ~ 1 + (1 | g/h) + (1 | f)").unwrap();
    let d = f.design(&frame()).unwrap();
    let groups: Vec<&str> = d.term_names.iter().map(|t| t.group.as_str()).collect();
    assert_eq!(groups, ["g", "g:h", "f"]);
    assert_eq!(d.trials.as_deref(), Some(&[1.5, 1.0, 4.5, 4.0, 7.5][..]));
    assert_eq!(d.term_names[1].levels.len(), 5);
    assert!(d.glmm(Family::Poisson).is_err());
}

#[test]
fn errors_name_the_place_and_the_fix() {
    let msg = |s: &str| Formula::parse(s).unwrap_err().to_string();
    assert!(msg("y ~ log(x) + (1 | g)").contains("factor(…)"));
    assert!(msg("y ~ x + (1 | g").contains("at the end"));
    assert!(msg("y ~ x").contains("no random-effect term"));
    assert!(msg("y ~ x - f + (1|g)").contains("leave the term out"));
    assert!(msg("y ~ x ^ 2 + (1|g)").contains("character 7"));
    let e = Formula::parse("y ~ x + (1 | g) + (1 + x | g)")
        .unwrap()
        .design(&frame())
        .unwrap()
        .glmm(Family::Poisson)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`(Intercept)` of random-effect term 1 (grouped by `g`)")
            && e.contains("term 2"),
        "{e}"
    );
    let e = Formula::parse("y ~ z + (1 | g)")
        .unwrap()
        .design(&frame())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no column `z`") && e.contains("y, x, f, g, h"),
        "{e}"
    );
    let e = Formula::parse("y ~ x + (1 | g)")
        .unwrap()
        .design(
            &Frame::new(
                vec!["y".into(), "x".into(), "g".into()],
                vec![
                    Column::Number(vec![f64::NAN]),
                    Column::Number(vec![1.0]),
                    Column::Number(vec![1.0]),
                ],
            )
            .unwrap(),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing"), "{e}");
}

/// A categorical fixed effect with a level on every row (numbers written as text, or a
/// factor() of distinct values) is refused by the column's name; a text predictor with fewer
/// levels than rows, and the same column as a grouping factor, are not.
#[test]
fn a_predictor_with_a_level_on_every_row_is_refused_by_name() {
    let wrapped = |v: f64| format!("np.float64({v})");
    let f = Frame::new(
        vec!["y".into(), "x".into(), "g".into()],
        vec![
            Column::Number(vec![1.0, 0.0, 3.0, 2.0]),
            Column::infer((1..=4).map(|i| wrapped(i as f64 / 10.0)).collect()),
            Column::Number(vec![1.0, 1.0, 2.0, 2.0]),
        ],
    )
    .unwrap();
    let design = |s: &str| Formula::parse(s).unwrap().design(&f);
    let e = design("y ~ x + (1 | g)").unwrap_err().to_string();
    assert!(
        e.contains("column `x`") && e.contains("np.float64(0.1)") && e.contains("plain numbers"),
        "{e}"
    );
    let e = design("y ~ factor(y) + (1 | g)").unwrap_err().to_string();
    assert!(e.contains("column `y`: factor()"), "{e}");
    assert!(design("y ~ factor(g) + (1 | g)").is_ok());
    assert!(design("y ~ 1 + (1 | x)").is_ok());
}

#[test]
fn text_is_inferred_and_a_two_level_response_is_binary() {
    let c = Column::infer(vec!["1".into(), "NA".into(), " 2.5 ".into()]);
    assert!(matches!(&c, Column::Number(v) if v[0] == 1.0 && v[1].is_nan() && v[2] == 2.5));
    let c = Column::infer(vec!["yes".into(), "".into(), "no".into()]);
    assert_eq!(
        c,
        Column::Text(vec![Some("yes".into()), None, Some("no".into())])
    );
    let f = Frame::new(
        vec!["ok".into(), "g".into()],
        vec![c, Column::Number(vec![1.0, 1.0, 2.0])],
    )
    .unwrap();
    let d = Formula::parse("ok ~ (1 | g)").unwrap().design(&f).unwrap();
    // "no" < "yes": no is the failure.
    assert_eq!(d.y, [1.0, 0.0]);
    assert_eq!(d.dropped, 1);
}

#[test]
fn offsets_are_read_summed_and_checked() {
    let design = |s: &str| Formula::parse(s).unwrap().design(&frame());
    // x is 0.5 … 2.5 on the rows kept (y's last is missing); g is 10, 2, 10, 2, 10.
    let d = design("y ~ f + offset(log(x)) + (1 | h)").unwrap();
    let want: Vec<f64> = [0.5f64, 1.0, 1.5, 2.0, 2.5]
        .iter()
        .map(|v| v.ln())
        .collect();
    assert_eq!(d.offset.as_deref(), Some(&want[..]));
    assert_eq!(d.x_names, ["(Intercept)", "fb", "fc"]);
    // Two offsets are summed, as R sums them, and one written twice counts once (R's
    // model.offset); none gives None.
    let d = design("y ~ offset(g) + x + offset(log(x)) + offset(g) + (1 | h)").unwrap();
    let sum: Vec<f64> = [10.0, 2.0, 10.0, 2.0, 10.0]
        .iter()
        .zip(&want)
        .map(|(g, l)| g + l)
        .collect();
    assert_eq!(d.offset.as_deref(), Some(&sum[..]));
    assert_eq!(d.x_names, ["(Intercept)", "x"]);
    assert!(design("y ~ x + (1 | h)").unwrap().offset.is_none());
    // The offset's column counts among the formula's: its missing values drop the row.
    let mut f = frame();
    f.columns[1] = Column::Number(vec![0.5, f64::NAN, 1.5, 2.0, 2.5, 3.0]);
    let d = Formula::parse("y ~ offset(log(x)) + (1 | h)")
        .unwrap()
        .design(&f)
        .unwrap();
    assert_eq!((d.n_obs, d.dropped), (4, 2));
    // Its place and its fix.
    let msg = |s: &str| Formula::parse(s).unwrap_err().to_string();
    assert!(msg("y ~ x + (offset(x) | g)").contains("among the fixed effects"));
    assert!(msg("y ~ x - offset(x) + (1 | g)").contains("an offset removed"));
    assert!(msg("y ~ offset(sqrt(x)) + (1 | g)").contains("offset(log(x))"));
    assert!(msg("y ~ offset(log(x) + (1 | g)").contains("expected `)`"));
    let mut f = frame();
    f.columns[1] = Column::Number(vec![0.5, 0.0, 1.5, 2.0, 2.5, 3.0]);
    let e = Formula::parse("y ~ offset(log(x)) + (1 | h)")
        .unwrap()
        .design(&f)
        .unwrap_err();
    assert!(e.to_string().contains("`x` is 0 at data row 2"), "{e}");
    let e = design("y ~ offset(f) + (1 | h)").unwrap_err().to_string();
    assert!(e.contains("the offset `f` has text"), "{e}");
    // The model built from the design carries it: its ℓ is that of the arrays with the offset,
    // not without.
    let d = design("y ~ offset(log(x)) + (1 | h)").unwrap();
    let loglik = |m: Glmm| m.log_likelihood(&[0.4, -0.5], 0).unwrap().value;
    let (y, x, terms) = (d.y.clone(), d.x.clone(), d.terms.clone());
    let offset = d.offset.clone().unwrap();
    let by_hand = Glmm::with_offset(
        Family::Poisson,
        y.clone(),
        x.clone(),
        terms.clone(),
        None,
        offset,
    );
    let l = loglik(d.glmm(Family::Poisson).unwrap());
    assert_eq!(l.to_bits(), loglik(by_hand.unwrap()).to_bits());
    assert_ne!(
        l,
        loglik(Glmm::with_terms(Family::Poisson, y, x, terms, None).unwrap())
    );
}
