//! Calendar definitions from YAML: bases resolved, mistakes refused.

use madeira_calendar::{Calendars, DefinitionError, parse_definitions};

use crate::day;

#[test]
fn a_trading_calendar_on_cn_workdays_skips_make_up_saturdays() {
    let defs = parse_definitions("kind: calendar\nname: sse\nbase: cn-workdays\nexclude_weekends: true\n")
        .expect("parses");
    let calendars = Calendars::builtin().extend(defs).expect("resolves");
    let sse = calendars.get("sse").expect("defined");
    assert_eq!(sse.base(), Some("cn-workdays"));
    assert_eq!(sse.is_business_day(day("2026-02-14")), Ok(false));
    assert_eq!(sse.is_business_day(day("2026-02-23")), Ok(false));
    assert_eq!(sse.is_business_day(day("2026-02-24")), Ok(true));
    assert_eq!(sse.last_known_day(), Some(day("2026-12-31")));
}

#[test]
fn a_list_of_definitions_with_ranges_and_defaulted_coverage() {
    let defs = parse_definitions(
        "- name: plant\n  base: all_days\n  holidays: ['2026-08-03..2026-08-07']\n- name: plant-office\n  base: plant\n  exclude_weekends: true\n  workdays: [2026-08-08]\n",
    )
    .expect("parses");
    assert_eq!(defs.len(), 2);
    let calendars = Calendars::builtin().extend(defs).expect("resolves");
    let plant = calendars.get("plant").expect("defined");
    assert_eq!(plant.is_business_day(day("2026-08-09")), Ok(true));
    assert_eq!(plant.is_business_day(day("2026-08-05")), Ok(false));
    assert_eq!(plant.first_known_day(), Some(day("2026-01-01")));
    assert_eq!(plant.last_known_day(), Some(day("2026-12-31")));
    let office = calendars.get("plant-office").expect("defined");
    assert_eq!(office.is_business_day(day("2026-08-08")), Ok(true));
    assert_eq!(office.is_business_day(day("2026-08-09")), Ok(false));
    assert_eq!(office.is_business_day(day("2026-08-07")), Ok(false));
    assert!(office.is_business_day(day("2027-01-01")).is_err());
    let names: Vec<&str> = calendars.names().collect();
    assert_eq!(names, ["all_days", "cn-workdays", "plant", "plant-office", "weekdays"]);
}

#[test]
fn unknown_bases_cycles_and_duplicates_are_refused() {
    let unknown = parse_definitions("name: a\nbase: cn-workday\n").expect("parses");
    let err = Calendars::builtin().extend(unknown).expect_err("unknown base");
    assert!(matches!(&err, DefinitionError::UnknownBase { base, .. } if base == "cn-workday"));
    assert!(err.to_string().contains("cn-workdays"), "{err}");

    let cycle = parse_definitions("- {name: a, base: b}\n- {name: b, base: a}\n").expect("parses");
    let err = Calendars::builtin().extend(cycle).expect_err("cycle");
    assert!(
        matches!(&err, DefinitionError::Cycle(path) if path.contains("a -> b -> a") || path.contains("b -> a -> b")),
        "{err}"
    );

    let twice = parse_definitions("- {name: a}\n- {name: a}\n").expect("parses");
    assert_eq!(Calendars::builtin().extend(twice), Err(DefinitionError::Duplicate("a".into())));

    let builtin = parse_definitions("name: weekdays\n").expect("parses");
    assert_eq!(Calendars::builtin().extend(builtin), Err(DefinitionError::Builtin("weekdays".into())));
}

#[test]
fn bad_days_and_fields_are_refused_with_the_reason() {
    let err = parse_definitions("name: a\nholidays: [2026-02-30]\n").expect_err("bad date");
    assert!(err.to_string().contains("2026-02-30"), "{err}");
    let err = parse_definitions("name: a\nholiday: [2026-02-03]\n").expect_err("unknown field");
    assert!(err.to_string().contains("holiday"), "{err}");
    let both =
        parse_definitions("name: a\nholidays: [2026-02-03]\nworkdays: [2026-02-03]\n").expect("parses");
    assert!(matches!(Calendars::builtin().extend(both), Err(DefinitionError::Both { .. })));
    let outside = parse_definitions("name: a\nuntil: 2026-06-30\nholidays: [2026-08-03]\n").expect("parses");
    assert!(matches!(Calendars::builtin().extend(outside), Err(DefinitionError::OutsideRange { .. })));
    let kind = parse_definitions("kind: flow\nname: a\n").expect("parses");
    assert!(matches!(Calendars::builtin().extend(kind), Err(DefinitionError::WrongKind { .. })));
}

#[test]
fn a_user_cn_workdays_replaces_the_shipped_one() {
    let defs =
        parse_definitions("name: cn-workdays\nfrom: 2027-01-01\nuntil: 2027-12-31\nholidays: [2027-01-01]\n")
            .expect("parses");
    let calendars = Calendars::builtin().extend(defs).expect("resolves");
    let cn = calendars.get("cn-workdays").expect("defined");
    assert_eq!(cn.is_business_day(day("2027-01-01")), Ok(false));
    assert_eq!(cn.last_known_day(), Some(day("2027-12-31")));
}
