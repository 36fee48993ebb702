package feed

import (
	"fmt"
	"sort"
	"strings"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/onehost/onehost/internal/schema"
	"github.com/onehost/onehost/internal/sqlitec"
)

// schemaObject is one table, index, view or trigger of a database.
type schemaObject struct{ typ, name, sql string }

// checkSchema compares the tables, indexes, views and triggers of c with those that
// schema.SQL creates, by their CREATE statements with white space normalised, and names the
// first difference. SQLite's own objects (sqlite_stat1, automatic indexes) are ignored.
func (s *Store) checkSchema(c *sqlitec.Conn) error {
	var got []schemaObject
	err := s.retryErr(func() (err error) {
		got, err = readSchema(c)
		return err
	})
	if err != nil {
		return fmt.Errorf("read schema: %w", err)
	}
	mem, err := sqlitec.Open(":memory:", sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE|sqlite3.SQLITE_OPEN_MEMORY)
	if err != nil {
		return fmt.Errorf("build reference schema: %w", err)
	}
	defer mem.Close()
	if err := mem.Exec(schema.SQL); err != nil {
		return fmt.Errorf("build reference schema: %w", err)
	}
	want, err := readSchema(mem)
	if err != nil {
		return fmt.Errorf("build reference schema: %w", err)
	}
	return diffSchema(got, want)
}

// readSchema returns the tables, indexes, views and triggers, without SQLite's own, by name.
func readSchema(c *sqlitec.Conn) ([]schemaObject, error) {
	st, err := c.Prepare(`SELECT type, name, sql FROM sqlite_schema
WHERE name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer c.Finalize(st)
	var objs []schemaObject
	rc := c.Step(st)
	for ; rc == sqlite3.SQLITE_ROW; rc = c.Step(st) {
		objs = append(objs, schemaObject{
			typ:  string(c.ColumnText(st, 0)),
			name: string(c.ColumnText(st, 1)),
			sql:  string(c.ColumnText(st, 2)),
		})
	}
	if rc != sqlite3.SQLITE_DONE {
		return nil, c.ErrorFor(rc)
	}
	// ORDER BY sorts with SQLite's BINARY collation, which is Go's byte order too; sort
	// anyway so that diffSchema's merge never depends on it.
	sort.Slice(objs, func(i, j int) bool { return objs[i].name < objs[j].name })
	return objs, nil
}

// diffSchema returns nil when got and want (both sorted by name) are the same objects
// with the same normalised SQL, else an error naming the first difference.
func diffSchema(got, want []schemaObject) error {
	i, j := 0, 0
	for i < len(got) || j < len(want) {
		switch {
		case j == len(want) || (i < len(got) && got[i].name < want[j].name):
			return fmt.Errorf("schema differs from the challenge schema: unexpected %s %s", got[i].typ, got[i].name)
		case i == len(got) || want[j].name < got[i].name:
			return fmt.Errorf("schema differs from the challenge schema: %s %s is missing", want[j].typ, want[j].name)
		}
		g, w := got[i], want[j]
		if g.typ != w.typ || normalizeSQL(g.sql) != normalizeSQL(w.sql) {
			return fmt.Errorf("schema differs from the challenge schema: %s %s is %q, want %q",
				g.typ, g.name, normalizeSQL(g.sql), normalizeSQL(w.sql))
		}
		i++
		j++
	}
	return nil
}

// normalizeSQL collapses white space to single spaces and removes it next to parentheses
// and commas, so that layout alone is no difference. Case is kept: it matters inside
// string literals such as strftime's format.
func normalizeSQL(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	for _, p := range []string{"(", ")", ","} {
		q = strings.ReplaceAll(q, " "+p, p)
		q = strings.ReplaceAll(q, p+" ", p)
	}
	return q
}
