package shop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/onehost/onehost/internal/sqlitec"
)

// wantProductsHash is ProductsHash of every generated database. It changes only when
// the generator does; then update it, and the golden files, deliberately.
const wantProductsHash = "fdac8bede0d25d484eb6924cd832f015817dcbd6fb16e80b831740578d94dc72"

// helperEnv marks the test binary running as a helper process that calls EnsureProducts.
const helperEnv = "SHOP_TEST_ENSURE"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		created, err := EnsureProducts(context.Background(), path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(created)
		os.Exit(0)
	}
	code := m.Run()
	if productsDir != "" {
		os.RemoveAll(productsDir)
	}
	os.Exit(code)
}

// productsDir holds the database productsPath generated, removed by TestMain.
var productsDir string

// productsPath returns a products database generated once for the package's tests.
var productsPath = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "shop-test-")
	if err != nil {
		return "", err
	}
	productsDir = dir
	path := filepath.Join(dir, "products.db")
	_, err = EnsureProducts(context.Background(), path)
	return path, err
})

func testProducts(t testing.TB) string {
	t.Helper()
	path, err := productsPath()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func TestGenerateDeterministic(t *testing.T) {
	a, b := GenerateProducts(), GenerateProducts()
	if len(a) != ProductCount {
		t.Fatalf("%d products, want %d", len(a), ProductCount)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("product %d differs between two runs: %+v, %+v", i+1, a[i], b[i])
		}
	}
	if a[6].Name != `<script>alert("xss")</script> Deluxe Kettle` {
		t.Errorf("product 7 is %q, want the script name", a[6].Name)
	}
}

// TestProductsHash: the written database holds exactly the generated rows, the same on
// every machine.
func TestProductsHash(t *testing.T) {
	got, err := ProductsHash(testProducts(t))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, p := range GenerateProducts() {
		fmt.Fprintf(h, "%d\x1f%s\x1f%s\x1f%s\x1f%s\x1f%d\x1f%d\x1e", p.ID, p.SKU, p.Name, p.Category, p.Description, p.PriceCents, p.Stock)
	}
	if want := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Errorf("database hash %s, generated rows hash %s", got, want)
	}
	if got != wantProductsHash {
		t.Errorf("hash %s, want %s (did the generator change?)", got, wantProductsHash)
	}
}

// TestEnsureConcurrent starts several processes that all find no database and generate
// it at once: all succeed, exactly one generates, and the result is complete.
func TestEnsureConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "products.db")
	const n = 4
	cmds := make([]*exec.Cmd, n)
	outs := make([]strings.Builder, n)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+path)
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	created := 0
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("process %d: %v\n%s", i, err, outs[i].String())
		}
		if strings.TrimSpace(outs[i].String()) == "true" {
			created++
		}
	}
	if created != 1 {
		t.Errorf("%d processes generated the database, want 1", created)
	}
	got, err := ProductsHash(path)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := ProductsHash(testProducts(t)); got != want {
		t.Errorf("hash %s, want %s", got, want)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".products.db.tmp-*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestEnsureExisting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "products.db")
	if created, err := EnsureProducts(context.Background(), path); err != nil || !created {
		t.Fatalf("first call: %v, %v", created, err)
	}
	if created, err := EnsureProducts(context.Background(), path); err != nil || created {
		t.Fatalf("second call: %v, %v; want false, nil", created, err)
	}
	if _, err := EnsureProducts(context.Background(), filepath.Join(t.TempDir(), "missing", "p.db")); err == nil {
		t.Error("a missing directory was not an error")
	}
}

func TestOpenStoreRefuses(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.db")
	c, err := sqlitec.Open(short, sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(Schema + `INSERT INTO products VALUES(1,'a','b','c','d',1,1);`); err != nil {
		t.Fatal(err)
	}
	c.Close()
	notDB := filepath.Join(dir, "text.db")
	os.WriteFile(notDB, []byte(strings.Repeat("not a database ", 20)), 0o644)
	for name, path := range map[string]string{"missing": filepath.Join(dir, "none.db"), "one row": short, "not a database": notDB} {
		t.Run(name, func(t *testing.T) {
			if s, err := OpenStore(context.Background(), path, StoreOptions{}); err == nil {
				s.Close()
				t.Errorf("opened %s", path)
			}
		})
	}
}
