//! Reading a user's data from a CSV file: one column of numbers, or a table with a header for a
//! model formula, with errors that name the file, the line and the problem.

use std::path::Path;

use anyhow::{bail, Context, Result};

/// Which column to read.
#[derive(Clone, Debug, PartialEq)]
pub enum Column {
    /// By header name.
    Name(String),
    /// By 1-based position.
    Index(usize),
}

impl std::str::FromStr for Column {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.parse::<usize>() {
            Ok(0) => Err("column numbers start at 1".into()),
            Ok(i) => Ok(Column::Index(i)),
            Err(_) if s.is_empty() => Err("give a column name or a 1-based number".into()),
            Err(_) => Ok(Column::Name(s.to_string())),
        }
    }
}

/// What must hold of every value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Domain {
    /// Finite and > 0 (a Gamma observation).
    Positive,
    /// Finite (an observation with additive noise).
    Finite,
}

/// One column of a user's file: its numbers, and which column they are, as a user reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnData {
    /// The numbers, one per data row.
    pub values: Vec<f64>,
    /// The column: "`x` (column 2 of 3)", or "column 1 of 1 (no header)".
    pub shown: String,
}

/// Reads one column of numbers. A first row whose field is not a number is a header. Blank lines
/// are skipped; anything else that is not a finite number in the domain is an error naming its line.
pub fn read_column(path: &Path, column: Option<&Column>, domain: Domain) -> Result<ColumnData> {
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "cannot read the data file {}: check the path",
            path.display()
        )
    })?;
    parse_column(&bytes, &path.display().to_string(), column, domain)
}

/// [`read_column`] on the bytes of a file shown as `shown` in messages.
pub fn parse_column(
    bytes: &[u8],
    shown: &str,
    column: Option<&Column>,
    domain: Domain,
) -> Result<ColumnData> {
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        bail!("the data file {shown} is empty: it needs one column of numbers, one per line");
    }
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(bytes);
    let mut values = Vec::new();
    let mut index: Option<usize> = match column {
        Some(Column::Index(i)) => Some(i - 1),
        _ => None,
    };
    let mut first = true;
    let mut width = 0;
    let mut header: Option<String> = None;
    for (k, rec) in rdr.records().enumerate() {
        let rec = rec.with_context(|| format!("{shown}: cannot parse line {} as CSV", k + 1))?;
        let line = rec.position().map(|p| p.line()).unwrap_or(k as u64 + 1);
        if rec.iter().all(|f| f.is_empty()) {
            continue;
        }
        if !first && rec.len() != width {
            bail!(
                "{shown}, line {line}: {} field(s) where the first row has {width}: a decimal comma (`6,172`)? write numbers with a decimal point, or quote a field that contains a comma",
                rec.len()
            );
        }
        if first {
            first = false;
            width = rec.len();
            if let Some(Column::Name(name)) = column {
                let pos = rec.iter().position(|f| f == name);
                match pos {
                    Some(p) => {
                        index = Some(p);
                        header = Some(name.clone());
                        continue;
                    }
                    None => bail!(
                        "{shown}: no column named `{name}` in the header (line {line}: {}): give one of these names or a column number",
                        rec.iter().collect::<Vec<_>>().join(", ")
                    ),
                }
            }
            let j = index.unwrap_or(0);
            if let Some(f) = rec.get(j) {
                if f.parse::<f64>().is_err() {
                    // A header row.
                    index = Some(j);
                    header = Some(f.to_string());
                    continue;
                }
            }
        }
        let j = index.unwrap_or(0);
        let field = rec.get(j).with_context(|| {
            format!("{shown}, line {line}: has {} field(s), no column {}: choose the column with --column", rec.len(), j + 1)
        })?;
        let v: f64 = field
            .parse()
            .map_err(|_| anyhow::anyhow!("{shown}, line {line}: `{field}` is not a number"))?;
        if !v.is_finite() {
            bail!("{shown}, line {line}: `{field}` is not a finite number: remove or correct it");
        }
        if domain == Domain::Positive && v <= 0.0 {
            bail!(
                "{shown}, line {line}: `{field}` is not positive: the Gamma model needs observations > 0"
            );
        }
        values.push(v);
    }
    if values.is_empty() {
        bail!("the data file {shown} has no data rows (only a header?): it needs one column of numbers");
    }
    let j = index.unwrap_or(0) + 1;
    let shown = match header {
        Some(h) => format!("`{h}` (column {j} of {width})"),
        None => format!("column {j} of {width} (no header)"),
    };
    Ok(ColumnData { values, shown })
}

/// Reads a CSV table whose first row names its columns: each column numbers where every value
/// that is not missing (empty, `NA`, `NaN`) reads as one, else labels.
pub fn read_table(path: &Path) -> Result<sagd::glmm::Frame> {
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "cannot read the data file {}: check the path",
            path.display()
        )
    })?;
    parse_table(&bytes, &path.display().to_string())
}

/// [`read_table`] on the bytes of a file shown as `shown` in messages.
pub fn parse_table(bytes: &[u8], shown: &str) -> Result<sagd::glmm::Frame> {
    use sagd::glmm::formula::Column as Values;
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(bytes);
    let mut names: Vec<String> = Vec::new();
    let mut fields: Vec<Vec<String>> = Vec::new();
    for (k, rec) in rdr.records().enumerate() {
        let rec = rec.with_context(|| format!("{shown}: cannot parse line {} as CSV", k + 1))?;
        let line = rec.position().map(|p| p.line()).unwrap_or(k as u64 + 1);
        if rec.iter().all(|f| f.is_empty()) {
            continue;
        }
        if names.is_empty() {
            names = rec.iter().map(str::to_string).collect();
            if let Some(j) = names.iter().position(String::is_empty) {
                bail!("{shown}, line {line}: column {} has no name: the first row must name every column", j + 1);
            }
            fields = vec![Vec::new(); names.len()];
            continue;
        }
        if rec.len() != names.len() {
            bail!(
                "{shown}, line {line}: {} field(s) where the header names {}: a decimal comma (`6,172`)? write numbers with a decimal point, or quote a field that contains a comma",
                rec.len(),
                names.len()
            );
        }
        for (col, f) in fields.iter_mut().zip(rec.iter()) {
            col.push(f.to_string());
        }
    }
    if names.is_empty() {
        bail!("the data file {shown} is empty: it needs a header row naming the columns, then one row per observation");
    }
    if fields[0].is_empty() {
        bail!("the data file {shown} has no data rows (only a header?)");
    }
    let columns = fields.into_iter().map(Values::infer).collect();
    sagd::glmm::Frame::new(names, columns).with_context(|| format!("the data file {shown}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(s: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), s).unwrap();
        f
    }

    fn err(s: &str, col: Option<Column>) -> String {
        let f = write(s);
        format!(
            "{:#}",
            read_column(f.path(), col.as_ref(), Domain::Positive).unwrap_err()
        )
    }

    #[test]
    fn reads_plain_and_headed_columns() {
        let read = |f: &tempfile::NamedTempFile, c: Option<Column>| {
            let d = read_column(f.path(), c.as_ref(), Domain::Positive).unwrap();
            (d.values, d.shown)
        };
        let f = write("1.5\n2\n\n3e0\n");
        let plain = (vec![1.5, 2.0, 3.0], "column 1 of 1 (no header)".to_string());
        assert_eq!(read(&f, None), plain);
        // The column used is named as the user reads it, the default one too.
        let f = write("id,x\n1,0.5\n2,4\n");
        let x = (vec![0.5, 4.0], "`x` (column 2 of 2)".to_string());
        assert_eq!(read(&f, Some(Column::Name("x".into()))), x);
        assert_eq!(read(&f, Some(Column::Index(2))), x);
        assert_eq!(read(&f, None).1, "`id` (column 1 of 2)");
    }

    #[test]
    fn every_bad_input_names_its_problem() {
        assert!(err("", None).contains("is empty"));
        assert!(err("x\n", None).contains("no data rows"));
        assert!(err("1\nabc\n", None).contains("line 2: `abc` is not a number"));
        assert!(err("1\nNaN\n", None).contains("line 2: `NaN` is not a finite number"));
        assert!(err("1\ninf\n", None).contains("not a finite number"));
        assert!(err("1\n0\n", None).contains("line 2: `0` is not positive"));
        assert!(err("1\n-2\n", None).contains("not positive"));
        assert!(err("a,b\n1,2\n", Some(Column::Name("c".into()))).contains("no column named `c`"));
        assert!(
            err("1\n2,3\n", Some(Column::Index(2))).contains("line 1: has 1 field(s), no column 2")
        );
        // A decimal comma makes two fields of one number: refused, never read as 6.
        assert!(err("x\n6,172\n", None).contains("line 2: 2 field(s) where the first row has 1"));
        assert!(err("1,2\n3\n", Some(Column::Index(2))).contains("decimal comma"));
        let missing =
            read_column(Path::new("/nonexistent/data.csv"), None, Domain::Positive).unwrap_err();
        assert!(format!("{missing:#}").contains("cannot read the data file /nonexistent/data.csv"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]
        /// Whatever the bytes: a list of finite numbers in the domain, or an error; never a panic.
        #[test]
        fn any_bytes_give_numbers_or_an_error(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            text in "[0-9a-z,.;\"\n -]{0,40}",
            col in 1usize..4,
        ) {
            for b in [&bytes[..], text.as_bytes()] {
                for c in [None, Some(Column::Index(col)), Some(Column::Name("x".into()))] {
                    if let Ok(ColumnData { values: v, .. }) = parse_column(b, "f", c.as_ref(), Domain::Positive) {
                        proptest::prop_assert!(!v.is_empty() && v.iter().all(|x| x.is_finite() && *x > 0.0));
                    }
                }
            }
        }

        /// A mixed model's table and formula from any text: a model ready to fit, or an
        /// error; never a panic (the CSV reader, the column types, R's coding, the checks).
        #[test]
        fn any_table_and_formula_give_a_model_or_an_error(
            rows in "([0-9]{1,2},-?[0-9](\\.[0-9])?,[a-c]\n){0,12}",
            junk in "[0-9a-c.,-]{0,6}\n",
            at in 0usize..40,
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            formula in "y ~ (1|x|0)( \\+ (x|g|x:g))?( \\+ \\((1|x|1 \\+ x|0 \\+ x) \\| g\\))?( - 1)?",
        ) {
            // Mostly well-formed rows, sometimes a line of junk among them.
            let mut table = format!("y,x,g\n{rows}");
            if at < table.len() && table.is_char_boundary(at) && at % 3 == 0 {
                table.insert_str(at, &junk);
            }
            for b in [table.as_bytes(), &bytes[..]] {
                let Ok(frame) = parse_table(b, "f") else { continue };
                let Ok(f) = sagd::glmm::formula::Formula::parse(&formula) else { continue };
                if let Ok(design) = f.design(&frame) {
                    for family in [sagd::glmm::Family::Poisson, sagd::glmm::Family::Gaussian] {
                        let _ = design.glmm(family);
                    }
                }
            }
        }
    }
}
