package trellistype_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/trellistype"
)

func TestStatusJSONListsAreArraysAndAbsentValuesNull(t *testing.T) {
	t.Parallel()
	raw, err := json.Marshal(trellistype.Status{Target: "public.t", State: trellistype.StateLive,
		Since: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)})
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, "public.t", got["target"])
	require.Equal(t, "live", got["state"])
	require.Equal(t, "2026-01-02T03:04:05.000006Z", got["since"])
	for _, k := range []string{"paused_reason", "held_keys", "drain_failure", "capture_failure", "capture_wait", "backfill_failure"} {
		v, ok := got[k]
		require.True(t, ok, k)
		require.Nil(t, v, k)
	}
	for _, k := range []string{"backfilling_columns", "sources", "paused_upstream_columns", "source_index_gaps", "correcting"} {
		require.Equal(t, []any{}, got[k], k)
	}

	raw, err = json.Marshal(trellistype.Status{PausedReason: "paused by PAUSE TRANSFORM",
		DrainFailure: &trellistype.DrainFailure{SegSeq: 7}})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, "paused by PAUSE TRANSFORM", got["paused_reason"])
	require.Equal(t, []any{}, got["drain_failure"].(map[string]any)["tables"])
	require.Nil(t, got["drain_failure"].(map[string]any)["sqlstate"])
}

func TestQuarantineEntryJSONZeroSinceIsNull(t *testing.T) {
	t.Parallel()
	raw, err := json.Marshal(trellistype.QuarantineEntry{Target: "t.c", State: trellistype.StateLive})
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(raw, &got))
	v, ok := got["since"]
	require.True(t, ok)
	require.Nil(t, v)
	require.Equal(t, "t.c", got["target"])
	require.Nil(t, got["held_keys"])
}

func TestCursorRoundTripsThroughTextAndJSON(t *testing.T) {
	t.Parallel()
	c := trellistype.NewCursor("public.orders", `(1,"a b")`)
	var back trellistype.Cursor
	require.NoError(t, back.UnmarshalText([]byte(c.String())))
	table, key := back.After()
	require.Equal(t, "public.orders", table)
	require.Equal(t, `(1,"a b")`, key)

	raw, err := json.Marshal(trellistype.SamplePage{NextCursor: c})
	require.NoError(t, err)
	require.JSONEq(t, `{"samples":[],"next_cursor":"`+c.String()+`"}`, string(raw))
	var page trellistype.SamplePage
	require.NoError(t, json.Unmarshal(raw, &page))
	require.Equal(t, c.String(), page.NextCursor.String())

	require.Error(t, back.UnmarshalText([]byte("tc1:!!")))
	require.Error(t, back.UnmarshalText([]byte("nope")))
}

func TestSelfCheckReportJSONListsAreArrays(t *testing.T) {
	t.Parallel()
	raw, err := json.Marshal(trellistype.SelfCheckReport{Outcome: trellistype.SelfCheckDiverged,
		Divergences: []trellistype.Divergence{{Kind: trellistype.DivergenceMissing, Key: "1"}}})
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, []any{}, got["drain_failures"])
	require.Equal(t, []any{}, got["paused_columns"])
	d := got["divergences"].([]any)[0].(map[string]any)
	require.Equal(t, "missing", d["kind"])
	require.Equal(t, []any{}, d["columns"])
	require.Nil(t, d["target"])
}

// Every list of every value type prints as [] when it is nil, so a
// consumer of the JSON never meets null where it expects an array.
func TestEveryListPrintsAsAnArray(t *testing.T) {
	t.Parallel()
	for _, v := range []any{
		trellistype.Status{}, trellistype.DrainFailure{}, trellistype.CaptureFailure{}, trellistype.CaptureWait{},
		trellistype.SourceIndexGap{}, trellistype.DefinitionSummary{}, trellistype.SamplePage{},
		trellistype.SelfCheckReport{}, trellistype.Divergence{}, trellistype.SyncPlan{}, trellistype.SyncChange{},
	} {
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		var got map[string]any
		require.NoError(t, json.Unmarshal(raw, &got))
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			f := rt.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Type.Kind() != reflect.Slice || name == "-" {
				continue
			}
			require.Equal(t, []any{}, got[name], "%s.%s", rt.Name(), f.Name)
		}
	}
}
