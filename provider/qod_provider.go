// Package provider holds the Terraform providers `qod` and `aperio`, built on
// terraform-plugin-framework. Each provider serves only its own resources;
// main.go picks one by the binary's name.
package provider

import (
	"context"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/qodaperio/autoscale/internal/client"
)

// DefaultEndpoint is where the API server listens unless told otherwise.
const DefaultEndpoint = "http://127.0.0.1:20900"

// QodProvider is the `qod` provider: QoD pools and their autoscale bands.
type QodProvider struct {
	version string
}

var _ provider.Provider = (*QodProvider)(nil)

// NewQod returns a factory for the `qod` provider.
func NewQod(version string) func() provider.Provider {
	return func() provider.Provider { return &QodProvider{version: version} }
}

// connectionModel is the provider block both providers take.
type connectionModel struct {
	Endpoint types.String `tfsdk:"endpoint"`
	APIKey   types.String `tfsdk:"api_key"`
}

func (p *QodProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "qod"
	resp.Version = p.version
}

func connectionSchema(envPrefix string) schema.Schema {
	return schema.Schema{
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Base URL of the control plane's API, e.g. `http://127.0.0.1:20900`. Falls back to `" +
					envPrefix + "_ENDPOINT`, then to `" + DefaultEndpoint + "`.",
			},
			"api_key": schema.StringAttribute{
				Optional:            true,
				Sensitive:           true,
				MarkdownDescription: "API key sent as `X-API-Key`. Falls back to `" + envPrefix + "_API_KEY`. An org-scoped key may only manage its own tenant.",
			},
		},
	}
}

func (p *QodProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = connectionSchema("QOD")
	resp.Schema.MarkdownDescription = "Manages autoscale bands of QoD database pools on the control plane's API server."
}

// configureClient builds the API client from the provider block and the
// environment; the block wins.
func configureClient(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse, envPrefix, version string) *client.Client {
	var cfg connectionModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return nil
	}
	if cfg.Endpoint.IsUnknown() || cfg.APIKey.IsUnknown() {
		resp.Diagnostics.AddError("Provider configuration not yet known",
			"endpoint and api_key must be known at plan time; they depend on values known only after apply.")
		return nil
	}
	endpoint := os.Getenv(envPrefix + "_ENDPOINT")
	if !cfg.Endpoint.IsNull() {
		endpoint = cfg.Endpoint.ValueString()
	}
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	key := os.Getenv(envPrefix + "_API_KEY")
	if !cfg.APIKey.IsNull() {
		key = cfg.APIKey.ValueString()
	}
	if key == "" {
		resp.Diagnostics.AddError("Missing API key",
			"Set api_key in the provider block or the "+envPrefix+"_API_KEY environment variable. The server prints its operator key on first start.")
		return nil
	}
	c, err := client.New(client.Options{Endpoint: endpoint, APIKey: key, UserAgent: "terraform-provider-" + version})
	if err != nil {
		resp.Diagnostics.AddAttributeError(pathEndpoint, "Invalid endpoint", err.Error())
		return nil
	}
	return c
}

func (p *QodProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	c := configureClient(ctx, req, resp, "QOD", "qod/"+p.version)
	if c == nil {
		return
	}
	data := &qodData{client: c}
	resp.ResourceData = data
	resp.DataSourceData = data
}

func (p *QodProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{NewPoolAutoscaleResource}
}

func (p *QodProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{NewPoolDataSource, NewPoolsDataSource}
}
