// Package band holds the five rules an autoscale band must obey and the
// outside_band check on manual scaling. It is the only place these rules are
// written: the API server enforces them and the Terraform provider runs the
// same functions at plan time, so both speak with one voice.
package band

import (
	"fmt"

	"github.com/qodaperio/autoscale/internal/api"
)

// DefaultHardCap is the manager-wide ceiling on maxNodes when the operator
// sets none.
const DefaultHardCap = 16

// Band is a pool's autoscale range, both ends inclusive.
type Band struct {
	Min int `json:"minNodes"`
	Max int `json:"maxNodes"`
}

func (b Band) String() string { return fmt.Sprintf("[%d, %d]", b.Min, b.Max) }

// Contains reports whether size lies inside the band.
func (b Band) Contains(size int) bool { return size >= b.Min && size <= b.Max }

// Pool is what the rules need to know about the pool a band is declared on.
type Pool struct {
	Size      int // current size; 0 when suspended
	Suspended bool
	Writeonly int
	Dual      int
	Cohorts   int // number of authored cohorts
}

func invalid(format string, args ...any) *api.Error {
	return api.Errorf(api.CodeInvalidBand, format, args...)
}

// Pair checks that both bounds are given or neither is. It returns the band
// and whether one was given. A half-declared band is refused rather than
// guessed at.
func Pair(minNodes, maxNodes *int) (Band, bool, error) {
	switch {
	case minNodes == nil && maxNodes == nil:
		return Band{}, false, nil
	case minNodes == nil:
		return Band{}, false, invalid("minNodes and maxNodes are set together or not at all: got maxNodes %d without minNodes", *maxNodes)
	case maxNodes == nil:
		return Band{}, false, invalid("minNodes and maxNodes are set together or not at all: got minNodes %d without maxNodes", *minNodes)
	}
	return Band{Min: *minNodes, Max: *maxNodes}, true, nil
}

// CheckBounds is rule 1, the only rule that needs nothing but the band:
// 1 <= minNodes <= maxNodes.
func CheckBounds(b Band) error {
	if b.Min < 1 {
		return invalid("rule 1 (1 <= minNodes <= maxNodes): minNodes is %d, it must be at least 1", b.Min)
	}
	if b.Min > b.Max {
		return invalid("rule 1 (1 <= minNodes <= maxNodes): minNodes %d is greater than maxNodes %d", b.Min, b.Max)
	}
	return nil
}

// CheckHardCap is rule 2: maxNodes <= autoscale.hardCap.
func CheckHardCap(b Band, hardCap int) error {
	if b.Max > hardCap {
		return invalid("rule 2 (maxNodes <= autoscale.hardCap): maxNodes %d exceeds the hard cap %d", b.Max, hardCap)
	}
	return nil
}

// Validate runs all five rules in order and returns the first that fails.
func Validate(b Band, hardCap int, p Pool) error {
	if err := CheckBounds(b); err != nil {
		return err
	}
	if err := CheckHardCap(b, hardCap); err != nil {
		return err
	}
	if writers := p.Writeonly + p.Dual; b.Min < writers {
		return invalid("rule 3 (minNodes covers the write-capable nodes): minNodes %d is below the pool's %d write-capable nodes (writeonly %d + dual %d)",
			b.Min, writers, p.Writeonly, p.Dual)
	}
	if !b.Contains(p.Size) {
		if p.Suspended {
			return invalid("rule 4 (current size inside the band): the pool is suspended, size 0 is outside every band; resume or scale it into %s first", b)
		}
		return invalid("rule 4 (current size inside the band): the pool's size %d is outside the band %s; scale it into the band first", p.Size, b)
	}
	if p.Cohorts > 0 {
		return invalid("rule 5 (no authored cohorts): the pool has %d authored cohort(s) and cannot be elastic; a pool/scale that rewrites the role distribution clears them", p.Cohorts)
	}
	return nil
}

// CheckTarget refuses a manual scale to a size outside the band, since the
// next sweep would only undo it.
func CheckTarget(target int, b Band) error {
	if !b.Contains(target) {
		return api.Errorf(api.CodeOutsideBand,
			"targetSize %d is outside the autoscale band %s; adjust the band first via pool/setAutoscale", target, b)
	}
	return nil
}
