package grammar

import (
	"fmt"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Schemas maps the unqualified names a definition uses to the schema the
// definer's session resolved each to: functions (and aggregates), types
// and operators.
type Schemas struct {
	Funcs, Types, Ops map[string]string
	// Default, when set, is the schema of every function and operator
	// named without a schema that the maps do not hold (pg_catalog, for
	// the built-ins PostgreSQL records no dependency on).
	Default string
}

// Qualify rewrites an expression (canonical SQL) so that every function,
// type and operator it names without a schema, and that s maps, names its
// schema: the expression then means the same in a session of any
// search_path. An expression with nothing to qualify comes back as it was.
func Qualify(expr string, s Schemas) (string, error) {
	if expr == "" || len(s.Funcs)+len(s.Types)+len(s.Ops) == 0 && s.Default == "" {
		return expr, nil
	}
	const prefix = "SELECT "
	tree, err := pgParse(prefix + expr)
	if err != nil {
		return "", err
	}
	changed := false
	one := func(names []*pg.Node, m map[string]string, def string) []*pg.Node {
		if len(names) != 1 || names[0].GetString_() == nil {
			return names
		}
		schema, ok := m[names[0].GetString_().GetSval()]
		if !ok {
			schema = def
		}
		if schema == "" {
			return names
		}
		changed = true
		return append([]*pg.Node{pg.MakeStrNode(schema)}, names...)
	}
	var visit func(m protoreflect.Message)
	visit = func(m protoreflect.Message) {
		switch n := m.Interface().(type) {
		case *pg.FuncCall:
			n.Funcname = one(n.Funcname, s.Funcs, s.Default)
		case *pg.TypeName:
			n.Names = one(n.Names, s.Types, "")
		case *pg.A_Expr:
			if n.Kind == pg.A_Expr_Kind_AEXPR_OP || n.Kind == pg.A_Expr_Kind_AEXPR_OP_ANY || n.Kind == pg.A_Expr_Kind_AEXPR_OP_ALL {
				n.Name = one(n.Name, s.Ops, s.Default)
			}
		}
		children(m, visit)
	}
	visit(tree.ProtoReflect())
	if !changed {
		return expr, nil
	}
	out, err := pgDeparse(tree)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(out, prefix) {
		return "", fmt.Errorf("qualifying %q: the deparsed form %q is not a select list", expr, out)
	}
	return strings.TrimPrefix(out, prefix), nil
}
