//! `run: {sql: …}`: the parsed definition and each mistake with its line.

use std::time::Duration;

use super::{errors, parse};
use crate::model::{ExecutorDef, SqlOutputs};

fn sql_flow(body: &str) -> String {
    format!("flow: f\nnodes:\n  a:\n    run:\n      sql:\n{body}")
}

#[test]
fn a_statement_with_binds_parses() {
    let flow = parse(&sql_flow(
        "        datasource: finance\n        statement: \"insert into t values (:day, :run_id);\"\n        params: {day: \"params.day\"}\n        outputs: first_row\n",
    ));
    let Some(ExecutorDef::Sql(def)) = flow.nodes[0].action_exec() else { panic!("sql") };
    assert_eq!(def.datasource, "finance");
    assert_eq!(def.datasource_line, Some(6));
    assert_eq!(def.statements, ["insert into t values (:day, :run_id)"]);
    assert_eq!(def.params["day"].source(), "params.day");
    assert_eq!(def.outputs, SqlOutputs::FirstRow);
    assert_eq!(def.grace, Duration::from_secs(5));
}

#[test]
fn a_script_is_split_and_rows_are_bounded() {
    let flow = parse(&sql_flow(
        "        datasource: finance\n        script: |\n          update a set x = 1;\n          select * from a\n        outputs: rows\n        max_rows: 7\n        grace: 2s\n",
    ));
    let Some(ExecutorDef::Sql(def)) = flow.nodes[0].action_exec() else { panic!("sql") };
    assert_eq!(def.statements, ["update a set x = 1", "select * from a"]);
    assert_eq!(def.outputs, SqlOutputs::Rows(7));
    assert_eq!(def.grace, Duration::from_secs(2));
}

#[test]
fn mistakes_name_their_line() {
    let got = errors(&sql_flow(
        "        datasource: finance\n        statement: \"select :dya\"\n        params: {day: \"params.day\"}\n",
    ));
    assert_eq!(
        got,
        [
            "flow.yaml:7: node a: `:dya` has no value; add it to `params` (CEL), e.g. `params: {dya: \"params.dya\"}`; did you mean `day`?"
        ]
    );
    let got = errors(&sql_flow("        datasource: finance\n        statement: \"select 1; select 2\"\n"));
    assert!(
        got[0].starts_with("flow.yaml:7: node a: `statement` holds 2 statements; use `script:`"),
        "{got:?}"
    );
    let got = errors(&sql_flow("        statement: \"select 1\"\n        outputs: first_rows\n"));
    assert!(got.iter().any(|e| e.starts_with("flow.yaml:6: node a: `sql` needs `datasource`")), "{got:?}");
    assert!(
        got.iter().any(|e| e
            .starts_with("flow.yaml:7: node a: unknown `outputs` `first_rows`; did you mean `first_row`?")),
        "{got:?}"
    );
    let got = errors(&sql_flow(
        "        datasource: d\n        statement: \"select :x\"\n        params: {x: \"params.\"}\n",
    ));
    assert!(got[0].starts_with("flow.yaml:8: node a: bad CEL in `params.x`"), "{got:?}");
    let got = errors(&sql_flow(
        "        datasource: d\n        statement: \"select 1\"\n        params: {run_id: \"1\"}\n",
    ));
    assert!(got[0].starts_with("flow.yaml:8: node a: `:run_id` is given by Madeira"), "{got:?}");
}

#[test]
fn datasources_are_checked_against_the_server_config() {
    use crate::spec::check_datasources;
    let flow = parse(&sql_flow("        datasource: financ\n        statement: \"select 1\"\n"));
    let known = vec!["finance".to_string(), "reports".to_string()];
    let e = check_datasources("f.yaml", &flow, &known).expect_err("unknown");
    assert_eq!(
        e.to_string(),
        "f.yaml:6: node a: unknown datasource `financ`; the server config has: finance, reports"
    );
    let e = check_datasources("f.yaml", &flow, &[]).expect_err("none configured");
    assert!(e.to_string().ends_with("the server config has: none"), "{e}");
    let ok = parse(&sql_flow("        datasource: finance\n        statement: \"select 1\"\n"));
    assert!(check_datasources("f.yaml", &ok, &known).is_ok());
}
