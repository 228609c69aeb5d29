package main

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// apiOf type-checks src as the one file of package example.com/m/p, the module's only
// public package.
func apiOf(t *testing.T, src string) api {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "p.go", "package p\n\n"+src, 0)
	if err != nil {
		t.Fatal(err)
	}
	conf := types.Config{Importer: importer.Default()}
	pkg, err := conf.Check("example.com/m/p", fset, []*ast.File{file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := newPrinter("example.com/m", []string{"example.com/m/p"})
	p.packageFeatures(pkg)
	a := api{}
	for f := range p.out {
		a[f] = everywhere
	}
	return a
}

func TestFeatures(t *testing.T) {
	t.Parallel()
	got := apiOf(t, `
import "io"

const N = 3
const D Mode = 2
type Mode int
var V []string
func F(ctx chan<- int, rest ...io.Reader) (n int, err error) { return }
func G[T ~int | ~string](T) T { var t T; return t }
type T struct {
	A, b int
	io.Reader
	*inner
	Handle func(name string) error
}
type inner struct{ Promoted string; A bool }
func (T) Value() {}
func (*T) Pointer() {}
type I interface { M(x int) error; io.Closer }
type Sealed interface { M(); sealed() }
type Alias = T
type Empty interface{}
func New() *hidden { return nil }
type hidden struct{ Field int }
func (*hidden) Do() {}
`).lines()
	want := []string{
		"pkg p, const D Mode = 2",
		"pkg p, const N untyped int = 3",
		"pkg p, func F(chan<- int, ...io.Reader) (int, error)",
		"pkg p, func G[T ~int | ~string](T) T",
		"pkg p, func New() *hidden",
		"pkg p, method (*T) Pointer()",
		"pkg p, method (*hidden) Do()",
		"pkg p, method (T) Read([]byte) (int, error)",
		"pkg p, method (T) Value()",
		"pkg p, type Alias = T",
		"pkg p, type Empty interface {}",
		"pkg p, type I interface { Close, M }",
		"pkg p, type I interface, Close() error",
		"pkg p, type I interface, M(int) error",
		"pkg p, type Mode int",
		"pkg p, type Sealed interface, M()",
		"pkg p, type Sealed interface, unexported methods",
		"pkg p, type T struct",
		"pkg p, type T struct, A int",
		"pkg p, type T struct, Handle func(string) error",
		"pkg p, type T struct, Promoted string",
		"pkg p, type T struct, embedded io.Reader",
		"pkg p, type hidden struct",
		"pkg p, type hidden struct, Field int",
		"pkg p, type hidden struct, comparable",
		"pkg p, var V []string",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("features (-want +got):\n%s", diff)
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                     string
		old, new                 string
		incompatible, compatible []string
		names                    []string
	}{{
		name: "parameter names are not API",
		old:  "func F(a int) {}",
		new:  "func F(b int) {}",
	}, {
		name: "byte is uint8, rune is int32",
		old:  "func F([]byte, rune) {}",
		new:  "func F([]uint8, int32) {}",
	}, {
		name: "an alias is the type",
		old:  "type T struct{}\nfunc F(T) {}",
		new:  "type T struct{}\ntype A = T\nfunc F(A) {}",
		compatible: []string{
			"+ pkg p, type A = T",
		},
	}, {
		name:       "a new function",
		old:        "func F() {}",
		new:        "func F() {}\nfunc G() {}",
		compatible: []string{"+ pkg p, func G()"},
	}, {
		name:         "a changed signature",
		old:          "func F(int) {}",
		new:          "func F(int64) {}",
		incompatible: []string{"- pkg p, func F(int)"},
		compatible:   []string{"+ pkg p, func F(int64)"},
		names:        []string{"p.F"},
	}, {
		name:         "a removed method",
		old:          "type T struct{}\nfunc (T) M() {}",
		new:          "type T struct{}",
		incompatible: []string{"- pkg p, method (T) M()"},
		names:        []string{"p.T"},
	}, {
		name:       "a new field",
		old:        "type T struct{ A int }",
		new:        "type T struct{ A, B int }",
		compatible: []string{"+ pkg p, type T struct, B int"},
	}, {
		name:         "a struct that is no longer comparable",
		old:          "type T struct{ A int }",
		new:          "type T struct{ A int; f func() }",
		incompatible: []string{"- pkg p, type T struct, comparable"},
		names:        []string{"p.T"},
	}, {
		name: "a method added to an interface others implement",
		old:  "type I interface{ M() }",
		new:  "type I interface{ M(); N() }",
		incompatible: []string{
			"- pkg p, type I interface { M }",
		},
		compatible: []string{
			"+ pkg p, type I interface { M, N }",
			"+ pkg p, type I interface, N()",
		},
		names: []string{"p.I"},
	}, {
		name:       "a method added to an interface only the package implements",
		old:        "type I interface{ M(); i() }",
		new:        "type I interface{ M(); N(); i() }",
		compatible: []string{"+ pkg p, type I interface, N()"},
	}, {
		name:         "a changed constant",
		old:          "const C = 1",
		new:          "const C = 2",
		incompatible: []string{"- pkg p, const C untyped int = 1"},
		compatible:   []string{"+ pkg p, const C untyped int = 2"},
		names:        []string{"p.C"},
	}, {
		name: "a method moved to the value receiver",
		old:  "type T struct{}\nfunc (*T) M() {}",
		new:  "type T struct{}\nfunc (T) M() {}",
		compatible: []string{
			"- pkg p, method (*T) M()",
			"+ pkg p, method (T) M()",
		},
	}, {
		name:         "a method moved to the pointer receiver",
		old:          "type T struct{}\nfunc (T) M() {}",
		new:          "type T struct{}\nfunc (*T) M() {}",
		incompatible: []string{"- pkg p, method (T) M()"},
		compatible:   []string{"+ pkg p, method (*T) M()"},
		names:        []string{"p.T"},
	}, {
		name:         "a changed field of an unexported type the API returns",
		old:          "func New() *impl { return nil }\ntype impl struct{ X int }",
		new:          "func New() *impl { return nil }\ntype impl struct{ X string }",
		incompatible: []string{"- pkg p, type impl struct, X int"},
		compatible:   []string{"+ pkg p, type impl struct, X string"},
		names:        []string{"p.impl"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := compare(apiOf(t, tc.old), apiOf(t, tc.new))
			want := difference{incompatible: tc.incompatible, compatible: tc.compatible, names: tc.names}
			if diff := cmp.Diff(want, d, cmp.AllowUnexported(difference{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("compare (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompareContexts(t *testing.T) {
	t.Parallel()
	linux, windows := ctxSet(1<<0), ctxSet(1<<2)
	f := feature{pkg: "p", text: "func F()"}
	if d := compare(api{f: linux}, api{f: everywhere}); len(d.incompatible) != 0 || len(d.compatible) != 2 {
		t.Errorf("a function that spreads to more systems: %+v, want compatible only", d)
	}
	d := compare(api{f: everywhere}, api{f: linux | windows})
	if diff := cmp.Diff([]string{"- pkg p (darwin), func F()"}, d.incompatible); diff != "" {
		t.Errorf("a function gone from darwin (-want +got):\n%s", diff)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	a := api{
		{pkg: "p", text: "func F(int, string) (int, error)"}: everywhere,
		{pkg: "p/q", text: "func Only()"}:                    ctxSet(1<<0 | 1<<2),
	}
	data := formatRecord(a)
	got, err := parseRecord("record", data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, got, cmp.AllowUnexported(feature{})); diff != "" {
		t.Errorf("parsed record (-want +got):\n%s", diff)
	}
	if _, err := parseRecord("record", []byte("# comment\nfunc F()\n")); err == nil ||
		err.Error() != `record:2: want "pkg PATH, FEATURE", have "func F()"; make api-record rewrites the record` {
		t.Errorf("parseRecord of a bad line: %v", err)
	}
}

func TestChangelogMentions(t *testing.T) {
	t.Parallel()
	c := changelog{top: "## Unreleased\n\n- `execcred.New` takes a context; `plugin.Options` lost Timeout.\n" +
		"- imagecred/plugin.Func changed; execcred.NewPlugin too.\n- removed mvproxy/old\n"}
	got := c.unmentioned([]string{
		"execcred.New",             // named
		"execcred.Config",          // not named
		"execcred/plugin.Options",  // named by its package's name
		"execcred/plugin.Func",     // imagecred/plugin.Func is another
		"execcred.NewPlugi",        // a prefix of a name is not a mention
		"mvproxy/old",              // a removed package
		"execproxy/server.Options", // not named
	})
	want := []string{"execcred.Config", "execcred/plugin.Func", "execcred.NewPlugi", "execproxy/server.Options"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unmentioned (-want +got):\n%s", diff)
	}
}
