package plan

// eachPlanNode calls fn on every node of a JSON EXPLAIN plan, its
// subplans included, parents before their children.
func eachPlanNode(node map[string]any, fn func(node map[string]any)) {
	fn(node)
	if subs, ok := node["Plans"].([]any); ok {
		for _, s := range subs {
			eachPlanNode(s.(map[string]any), fn)
		}
	}
}
