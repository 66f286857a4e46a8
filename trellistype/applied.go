package trellistype

// Applied is what a statement did: one of TransformDefined, Paused,
// Resumed, Dropped or Altered. Tell them apart with a type switch.
type Applied interface{ applied() }

// TransformDefined is the result of a TRANSFORM statement.
type TransformDefined struct {
	Target string `json:"target"` // "schema.table"
}

// Paused is the result of PAUSE TRANSFORM.
type Paused struct {
	Addresses []string `json:"addresses"`
}

// Resumed is the result of RESUME TRANSFORM: the addresses resumed (empty
// when nothing was paused).
type Resumed struct {
	Addresses []string `json:"addresses"`
}

// Dropped is the result of DROP TRANSFORM.
type Dropped struct {
	Target string `json:"target"`
}

// Altered is the result of ALTER TRANSFORM.
type Altered struct {
	Target string `json:"target"`
}

func (TransformDefined) applied() {}
func (Paused) applied()           {}
func (Resumed) applied()          {}
func (Dropped) applied()          {}
func (Altered) applied()          {}
