package main

import (
	"fmt"
	"go/types"
	"strconv"
	"strings"
)

// A feature is one thing about a package that code importing it can rely on: an exported
// name with its type or signature, a field, a method, an interface's method set, a struct's
// comparability. It reads as a line of the record, as in the Go project's api/go1.*.txt:
//
//	pkg execcred, func New(Config, Options) (Source, error)
//	pkg execcred, type BackoffOptions struct, Initial time.Duration
//	pkg execcred, method (*Plugin) Credential(context.Context, *Rejection) (*Credential, error)
//
// Every incompatible change removes or changes a line, and a compatible addition only adds
// lines (compare has the one exception). Signatures leave parameter names out, which
// callers cannot see; types are named by import path, or by path in the module for the
// module's own (execcred/wire.Info), so that no two types read alike.
type feature struct {
	pkg  string // the path in the module of the package ("execcred/plugin")
	text string // what the line says after "pkg <pkg>, "
}

// printer gathers the features of the public packages of a module. Types of the module
// that the API exposes but that have no features of their own there (those of internal
// packages, unexported ones) get theirs too, under the package that declares them: what a
// caller can reach through them is API all the same.
type printer struct {
	module  string
	public  map[string]bool
	out     map[feature]bool
	seen    map[*types.TypeName]bool
	pending []*types.TypeName
}

func newPrinter(module string, public []string) *printer {
	p := &printer{module: module, public: map[string]bool{}, out: map[feature]bool{}, seen: map[*types.TypeName]bool{}}
	for _, path := range public {
		p.public[path] = true
	}
	return p
}

// rel is the path of a package of the module relative to the module.
func (p *printer) rel(pkg *types.Package) string {
	if pkg.Path() == p.module {
		return "."
	}
	return strings.TrimPrefix(pkg.Path(), p.module+"/")
}

func (p *printer) add(pkg *types.Package, text string) {
	p.out[feature{pkg: p.rel(pkg), text: text}] = true
}

// packageFeatures adds the features of the exported names of pkg, then those of the types
// they expose.
func (p *printer) packageFeatures(pkg *types.Package) {
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		if obj := scope.Lookup(name); obj.Exported() {
			p.object(pkg, obj)
		}
	}
	for len(p.pending) > 0 {
		tn := p.pending[0]
		p.pending = p.pending[1:]
		if named, ok := tn.Type().(*types.Named); ok {
			p.namedFeatures(tn.Pkg(), named)
		}
	}
}

func (p *printer) object(pkg *types.Package, obj types.Object) {
	switch obj := obj.(type) {
	case *types.Const:
		p.add(pkg, fmt.Sprintf("const %s %s = %s", obj.Name(), p.typeString(pkg, obj.Type()), obj.Val().ExactString()))
	case *types.Var:
		p.add(pkg, fmt.Sprintf("var %s %s", obj.Name(), p.typeString(pkg, obj.Type())))
	case *types.Func:
		sig := obj.Type().(*types.Signature)
		p.add(pkg, "func "+obj.Name()+p.typeParams(pkg, sig.TypeParams())+p.signature(pkg, sig))
	case *types.TypeName:
		if obj.IsAlias() {
			p.add(pkg, fmt.Sprintf("type %s = %s", obj.Name(), p.typeString(pkg, obj.Type())))
			return
		}
		if named, ok := obj.Type().(*types.Named); ok {
			p.namedFeatures(pkg, named)
		}
	}
}

// namedFeatures adds the features of a defined type: what it is, its fields or its
// interface's methods, and its method set.
func (p *printer) namedFeatures(pkg *types.Package, named *types.Named) {
	name := named.Obj().Name()
	head := "type " + name + p.typeParams(pkg, named.TypeParams())
	switch u := named.Underlying().(type) {
	case *types.Struct:
		p.add(pkg, head+" struct")
		p.structFields(pkg, head, u, map[string]bool{}, map[*types.Struct]bool{})
		// Code may compare values with ==; a field that is not comparable, even an
		// unexported one, breaks it. (A generic type's comparability depends on its
		// arguments.)
		if named.TypeParams().Len() == 0 && types.Comparable(named) {
			p.add(pkg, head+" struct, comparable")
		}
	case *types.Interface:
		p.interfaceFeatures(pkg, head, u)
		return
	default:
		p.add(pkg, head+" "+p.typeString(pkg, u))
	}
	// The method set of *T holds T's; a method only *T has is marked so, since values of T
	// lack it.
	all := types.NewMethodSet(types.NewPointer(named))
	values := types.NewMethodSet(named)
	for i := range all.Len() {
		m := all.At(i).Obj().(*types.Func)
		if !m.Exported() {
			continue
		}
		recv := "*" + name
		if values.Lookup(m.Pkg(), m.Name()) != nil {
			recv = name
		}
		p.add(pkg, fmt.Sprintf("method (%s) %s%s", recv, m.Name(), p.signature(pkg, m.Type().(*types.Signature))))
	}
}

// structFields adds a struct's exported fields, embedded ones by their type; an
// unexported embedded struct is not a field a caller can name, so its exported fields are
// added as the promoted fields they are. have holds the names seen at shallower depths,
// which hide deeper ones.
func (p *printer) structFields(pkg *types.Package, head string, st *types.Struct, have map[string]bool, visited map[*types.Struct]bool) {
	if visited[st] {
		return
	}
	visited[st] = true
	var promoted []*types.Struct
	for i := range st.NumFields() {
		f := st.Field(i)
		switch {
		case have[f.Name()]:
		case f.Embedded() && !f.Exported():
			t := types.Unalias(f.Type())
			if ptr, ok := t.(*types.Pointer); ok {
				t = ptr.Elem()
			}
			if inner, ok := t.Underlying().(*types.Struct); ok {
				promoted = append(promoted, inner)
			}
		case f.Embedded():
			p.add(pkg, head+" struct, embedded "+p.typeString(pkg, f.Type()))
		case f.Exported():
			p.add(pkg, fmt.Sprintf("%s struct, %s %s", head, f.Name(), p.typeString(pkg, f.Type())))
		}
	}
	for i := range st.NumFields() {
		have[st.Field(i).Name()] = true
	}
	for _, inner := range promoted {
		p.structFields(pkg, head, inner, have, visited)
	}
}

// interfaceFeatures adds an interface's methods, and a line with their names: adding a
// method breaks the interface's implementations elsewhere, so it changes that line, unless
// an unexported method already keeps implementations inside the package.
func (p *printer) interfaceFeatures(pkg *types.Package, head string, iface *types.Interface) {
	if !iface.IsMethodSet() {
		p.add(pkg, head+" "+p.typeString(pkg, iface))
	}
	var names []string
	sealed := false
	for i := range iface.NumMethods() {
		m := iface.Method(i)
		if !m.Exported() {
			sealed = true
			continue
		}
		names = append(names, m.Name())
		p.add(pkg, fmt.Sprintf("%s interface, %s%s", head, m.Name(), p.signature(pkg, m.Type().(*types.Signature))))
	}
	switch {
	case sealed:
		p.add(pkg, head+" interface, unexported methods")
	case iface.IsMethodSet() && len(names) == 0:
		p.add(pkg, head+" interface {}")
	case iface.IsMethodSet():
		p.add(pkg, head+" interface { "+strings.Join(names, ", ")+" }")
	}
}

func (p *printer) typeParams(pkg *types.Package, list *types.TypeParamList) string {
	if list.Len() == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := range list.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		tp := list.At(i)
		b.WriteString(tp.Obj().Name() + " " + p.typeString(pkg, tp.Constraint()))
	}
	b.WriteByte(']')
	return b.String()
}

// signature is a function's parameters and results, without their names.
func (p *printer) signature(pkg *types.Package, sig *types.Signature) string {
	var b strings.Builder
	b.WriteByte('(')
	params := sig.Params()
	for i := range params.Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		t := params.At(i).Type()
		if sig.Variadic() && i == params.Len()-1 {
			b.WriteString("...")
			t = t.(*types.Slice).Elem()
		}
		b.WriteString(p.typeString(pkg, t))
	}
	b.WriteByte(')')
	results := sig.Results()
	switch results.Len() {
	case 0:
	case 1:
		b.WriteString(" " + p.typeString(pkg, results.At(0).Type()))
	default:
		b.WriteString(" (")
		for i := range results.Len() {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(p.typeString(pkg, results.At(i).Type()))
		}
		b.WriteByte(')')
	}
	return b.String()
}

// typeString writes t as seen from pkg: aliases resolved (a parameter that changes from
// a type to an alias of it has not changed), function types without parameter names.
func (p *printer) typeString(pkg *types.Package, t types.Type) string {
	switch t := types.Unalias(t).(type) {
	case *types.Basic:
		// byte and uint8 are one type, as are rune and int32: each pair is written one
		// way, so that respelling a type is no change.
		switch t.Kind() {
		case types.UnsafePointer:
			return "unsafe.Pointer"
		case types.Uint8:
			return "byte"
		}
		return types.Typ[t.Kind()].Name()
	case *types.Pointer:
		return "*" + p.typeString(pkg, t.Elem())
	case *types.Slice:
		return "[]" + p.typeString(pkg, t.Elem())
	case *types.Array:
		return fmt.Sprintf("[%d]%s", t.Len(), p.typeString(pkg, t.Elem()))
	case *types.Map:
		return "map[" + p.typeString(pkg, t.Key()) + "]" + p.typeString(pkg, t.Elem())
	case *types.Chan:
		elem := p.typeString(pkg, t.Elem())
		switch t.Dir() {
		case types.SendOnly:
			return "chan<- " + elem
		case types.RecvOnly:
			return "<-chan " + elem
		}
		if inner, ok := types.Unalias(t.Elem()).(*types.Chan); ok && inner.Dir() == types.RecvOnly {
			elem = "(" + elem + ")"
		}
		return "chan " + elem
	case *types.Signature:
		return "func" + p.signature(pkg, t)
	case *types.Struct:
		var fields []string
		for i := range t.NumFields() {
			f := t.Field(i)
			s := p.typeString(pkg, f.Type())
			if !f.Embedded() {
				s = f.Name() + " " + s
			}
			if tag := t.Tag(i); tag != "" {
				s += " " + strconv.Quote(tag)
			}
			fields = append(fields, s)
		}
		return "struct{" + strings.Join(fields, "; ") + "}"
	case *types.Interface:
		return p.interfaceString(pkg, t)
	case *types.Union:
		terms := make([]string, t.Len())
		for i := range t.Len() {
			terms[i] = p.typeString(pkg, t.Term(i).Type())
			if t.Term(i).Tilde() {
				terms[i] = "~" + terms[i]
			}
		}
		return strings.Join(terms, " | ")
	case *types.TypeParam:
		return t.Obj().Name()
	case *types.Named:
		return p.namedString(pkg, t)
	}
	panic(fmt.Sprintf("apicheck: no way to write %T %v", t, t))
}

func (p *printer) interfaceString(pkg *types.Package, t *types.Interface) string {
	var parts []string
	for i := range t.NumMethods() {
		m := t.Method(i)
		parts = append(parts, m.Name()+p.signature(pkg, m.Type().(*types.Signature)))
	}
	for i := range t.NumEmbeddeds() {
		e := types.Unalias(t.EmbeddedType(i))
		if named, ok := e.(*types.Named); ok && named.Obj().Pkg() == nil && named.Obj().Name() == "comparable" {
			parts = append(parts, "comparable")
		} else if _, ok := e.Underlying().(*types.Interface); !ok {
			parts = append(parts, p.typeString(pkg, e)) // a type set's terms
		}
	}
	switch {
	case len(parts) == 0:
		return "any"
	case t.IsImplicit():
		return parts[0] // a constraint written as a term: [T ~int]
	}
	return "interface{ " + strings.Join(parts, "; ") + " }"
}

// namedString names a defined type: unqualified in its own package, by path in the module
// for the module's, by import path otherwise. A type of the module that has no features of
// its own where the record lists them is queued for namedFeatures.
func (p *printer) namedString(pkg *types.Package, t *types.Named) string {
	obj := t.Obj()
	var b strings.Builder
	switch {
	case obj.Pkg() == nil: // error, comparable
	case obj.Pkg() == pkg:
	case p.inModule(obj.Pkg()):
		b.WriteString(p.rel(obj.Pkg()) + ".")
	default:
		b.WriteString(obj.Pkg().Path() + ".")
	}
	b.WriteString(obj.Name())
	if args := t.TypeArgs(); args.Len() > 0 {
		b.WriteByte('[')
		for i := range args.Len() {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(p.typeString(pkg, args.At(i)))
		}
		b.WriteByte(']')
	}
	origin := t.Origin().Obj()
	if origin.Pkg() != nil && p.inModule(origin.Pkg()) && (!p.public[origin.Pkg().Path()] || !origin.Exported()) && !p.seen[origin] {
		p.seen[origin] = true
		p.pending = append(p.pending, origin)
	}
	return b.String()
}

func (p *printer) inModule(pkg *types.Package) bool {
	return pkg.Path() == p.module || strings.HasPrefix(pkg.Path(), p.module+"/")
}
