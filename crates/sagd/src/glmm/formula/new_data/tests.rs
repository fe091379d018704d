//! New data coded as the fitted data: the same columns, the fitted levels first, and the
//! errors R gives for a level a fixed effect has not seen.

use super::super::tests::frame;
use super::*;

fn text(v: &[&str]) -> Column {
    Column::Text(v.iter().map(|s| Some(s.to_string())).collect())
}

/// Three new rows without the response: f's levels c and a, g's 10 and a new 7, h's w and a
/// new z.
fn new_rows() -> Frame {
    Frame::new(
        vec!["h".into(), "x".into(), "f".into(), "g".into()],
        vec![
            text(&["w", "z", "u"]),
            Column::Number(vec![4.0, 5.0, 6.0]),
            text(&["c", "a", "c"]),
            Column::Number(vec![10.0, 7.0, 7.0]),
        ],
    )
    .unwrap()
}

#[test]
fn new_rows_are_coded_as_the_fitted_rows_with_unseen_levels_last() {
    let f = Formula::parse("y ~ x * f + (1 + x | g) + (1 | h)").unwrap();
    let fitted = f.design(&frame()).unwrap();
    let d = f.new_design(&frame(), &new_rows()).unwrap();
    assert_eq!(d.x_names, fitted.x_names);
    // (Intercept), x, fb, fc, x:fb, x:fc at x = 4 (f = c), 5 (a), 6 (c).
    #[rustfmt::skip]
    let want = [
        1.0, 4.0, 0.0, 1.0, 0.0, 4.0,
        1.0, 5.0, 0.0, 0.0, 0.0, 0.0,
        1.0, 6.0, 0.0, 1.0, 0.0, 6.0,
    ];
    assert_eq!(d.x, want);
    // g's fitted levels 2, 10, then the new 7; h's u, v, w, then z.
    assert_eq!(d.term_names[0].levels, ["2", "10", "7"]);
    assert_eq!(d.terms[0].group, [1, 2, 2]);
    assert_eq!(d.terms[0].z, [1.0, 4.0, 1.0, 5.0, 1.0, 6.0]);
    assert_eq!(d.term_names[1].levels, ["u", "v", "w", "z"]);
    assert_eq!(d.terms[1].group, [2, 3, 0]);
    // No response in the new rows: NaN, named as the formula names it.
    assert!(d.y.iter().all(|v| v.is_nan()) && d.response == "y");
    assert_eq!((d.n_obs, d.dropped, d.rows.clone()), (3, 0, vec![0, 1, 2]));
}

#[test]
fn the_fitted_rows_as_new_data_are_their_own_design() {
    let f = Formula::parse("y ~ x * f + offset(log(x)) + (1 + x | g) + (1 | g:h)").unwrap();
    let fitted = f.design(&frame()).unwrap();
    let again = f.new_design(&frame(), &frame()).unwrap();
    // The fitted rows are the first 5 (the last has no response: it is kept, and new).
    let p = fitted.x_names.len();
    assert_eq!(
        (&again.x[..5 * p], &again.x_names),
        (&fitted.x[..], &fitted.x_names)
    );
    let offset = again.offset.as_ref().map(|o| o[..5].to_vec());
    assert_eq!(offset, fitted.offset);
    for (a, b) in again.terms.iter().zip(&fitted.terms) {
        let q = b.z.len() / 5;
        assert_eq!((&a.group[..5], &a.z[..5 * q]), (&b.group[..], &b.z[..]));
    }
    // Its levels of g:h are new: after the fitted ones.
    assert_eq!(again.term_names[0], fitted.term_names[0]);
    let (old, new) = (&fitted.term_names[1].levels, &again.term_names[1].levels);
    assert_eq!(
        (&new[..old.len()], &new[old.len()..]),
        (&old[..], &["2:w".to_string()][..])
    );
    // The row whose response is missing is kept, its response NaN.
    assert_eq!(again.rows, [0, 1, 2, 3, 4, 5]);
    assert_eq!(&again.y[..5], &fitted.y[..]);
    assert!(again.y[5].is_nan());
}

#[test]
fn a_text_response_keeps_its_fitted_levels() {
    let data = Frame::new(
        vec!["ok".into(), "g".into()],
        vec![
            text(&["yes", "no", "no"]),
            Column::Number(vec![1.0, 1.0, 2.0]),
        ],
    )
    .unwrap();
    let new = Frame::new(
        vec!["ok".into(), "g".into()],
        vec![
            Column::Text(vec![Some("yes".into()), None]),
            Column::Number(vec![2.0, 3.0]),
        ],
    )
    .unwrap();
    let f = Formula::parse("ok ~ (1 | g)").unwrap();
    let d = f.new_design(&data, &new).unwrap();
    assert_eq!(d.y[0], 1.0);
    assert!(d.y[1].is_nan());
    let other = Frame::new(
        vec!["ok".into(), "g".into()],
        vec![text(&["maybe"]), Column::Number(vec![2.0])],
    )
    .unwrap();
    let e = f.new_design(&data, &other).unwrap_err().to_string();
    assert!(
        e.contains("`ok` is `maybe` at new-data row 1") && e.contains("no or yes"),
        "{e}"
    );
}

#[test]
fn what_the_fit_cannot_predict_is_named() {
    let f = Formula::parse("y ~ x + f + offset(log(x)) + (1 | g)").unwrap();
    let mut new = new_rows();
    new.columns[2] = text(&["c", "d", "a"]);
    let e = f.new_design(&frame(), &new).unwrap_err().to_string();
    assert!(
        e.contains("`f` is `d` at new-data row 2, a level the fitted data do not have")
            && e.contains("(a, b, c)"),
        "{e}"
    );
    let e = Formula::parse("y ~ x + k + (1 | g)")
        .unwrap()
        .new_design(&frame(), &new_rows())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no column `k` in the data"), "{e}");
    let e = Formula::parse("y ~ x + (1 | h) + (1 | f)")
        .unwrap()
        .new_design(&frame(), &new_rows().without("f"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("new data") && e.contains("no column `f`"), "{e}");
    let mut new = new_rows();
    new.columns[1] = Column::Number(vec![4.0, 0.0, 6.0]);
    let e = f.new_design(&frame(), &new).unwrap_err().to_string();
    assert!(e.contains("`x` is 0 at new-data row 2"), "{e}");
    new.columns[1] = text(&["4", "five", "6"]);
    let e = f.new_design(&frame(), &new).unwrap_err().to_string();
    assert!(
        e.contains("new data") && e.contains("has text (`4`)"),
        "{e}"
    );
    // A row missing a predictor is dropped and counted.
    new.columns[1] = Column::Number(vec![4.0, f64::NAN, 6.0]);
    let d = f.new_design(&frame(), &new).unwrap();
    assert_eq!((d.n_obs, d.dropped, d.rows), (2, 1, vec![0, 2]));
}

impl Frame {
    /// This frame less its column `name`.
    fn without(&self, name: &str) -> Frame {
        let keep: Vec<usize> = (0..self.names.len())
            .filter(|&k| self.names[k] != name)
            .collect();
        Frame::new(
            keep.iter().map(|&k| self.names[k].clone()).collect(),
            keep.iter().map(|&k| self.columns[k].clone()).collect(),
        )
        .unwrap()
    }
}
