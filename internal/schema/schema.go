// Package schema holds the fixed schema of the "$12 Server Challenge" feed database and
// checks that a database file carries it. The schema may not change (challenge rule 4), so
// both the seed generator and the server take it from here.
package schema

import _ "embed"

// SQL is the challenge schema, verbatim.
//
//go:embed schema.sql
var SQL string
