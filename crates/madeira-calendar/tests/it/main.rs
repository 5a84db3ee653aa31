//! Integration tests of madeira-calendar: the shipped cn-workdays day by day,
//! property tests of the arithmetic, and YAML definitions.

mod cn_workdays;
mod definitions;
mod properties;

use chrono::NaiveDate;

pub fn day(text: &str) -> NaiveDate {
    NaiveDate::parse_from_str(text, "%Y-%m-%d").expect("test date")
}
