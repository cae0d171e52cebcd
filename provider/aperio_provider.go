package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/resource"

	"github.com/qodaperio/autoscale/internal/client"
)

// AperioProvider is the `aperio` provider: scaling hooks for hostnames.
type AperioProvider struct {
	version string
}

var _ provider.Provider = (*AperioProvider)(nil)

// NewAperio returns a factory for the `aperio` provider.
func NewAperio(version string) func() provider.Provider {
	return func() provider.Provider { return &AperioProvider{version: version} }
}

// aperioData is what the aperio provider hands its resources and data
// sources.
type aperioData struct {
	client *client.Client
}

func aperioDataFrom(v any) (*aperioData, error) {
	if v == nil {
		return nil, nil
	}
	d, ok := v.(*aperioData)
	if !ok {
		return nil, fmt.Errorf("unexpected provider data %T; this is a bug in the provider", v)
	}
	return d, nil
}

func (p *AperioProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "aperio"
	resp.Version = p.version
}

func (p *AperioProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = connectionSchema("APERIO")
	resp.Schema.MarkdownDescription = "Manages Aperio scaling hooks (the URL the server calls for more or fewer instances of a hostname) on the control plane's API server."
}

func (p *AperioProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	c := configureClient(ctx, req, resp, "APERIO", "aperio/"+p.version)
	if c == nil {
		return
	}
	data := &aperioData{client: c}
	resp.ResourceData = data
	resp.DataSourceData = data
}

func (p *AperioProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{NewScalingHookResource}
}

func (p *AperioProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{NewScalingHooksDataSource}
}
