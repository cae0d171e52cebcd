package provider

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/terraform-plugin-framework/path"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/client"
)

var pathEndpoint = path.Root("endpoint")

// qodData is what the qod provider hands its resources and data sources.
type qodData struct {
	client *client.Client

	// The server's autoscale settings do not change during a run; one read
	// serves every resource's plan.
	configOnce sync.Once
	config     *api.AutoscaleConfig
	configErr  error
}

func (d *qodData) autoscaleConfig(ctx context.Context) (*api.AutoscaleConfig, error) {
	d.configOnce.Do(func() { d.config, d.configErr = d.client.AutoscaleConfig(ctx) })
	return d.config, d.configErr
}

// qodDataFrom unpacks provider data handed to Configure of a resource or data
// source.
func qodDataFrom(v any) (*qodData, error) {
	if v == nil {
		return nil, nil // provider not configured yet (validation)
	}
	d, ok := v.(*qodData)
	if !ok {
		return nil, fmt.Errorf("unexpected provider data %T; this is a bug in the provider", v)
	}
	return d, nil
}

// bandFacts maps a pool as the API shows it onto what the band rules need.
func bandFacts(p *api.Pool) band.Pool {
	return band.Pool{
		Size:      p.Size,
		Suspended: p.Suspended,
		Writeonly: p.RoleDistribution.Writeonly,
		Dual:      p.RoleDistribution.Dual,
		Cohorts:   len(p.Cohorts),
	}
}
