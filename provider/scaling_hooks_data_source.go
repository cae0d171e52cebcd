package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

var _ datasource.DataSourceWithConfigure = (*scalingHooksDataSource)(nil)

// NewScalingHooksDataSource is the aperio_scaling_hooks data source.
func NewScalingHooksDataSource() datasource.DataSource { return &scalingHooksDataSource{} }

type scalingHooksDataSource struct {
	data *aperioData
}

type scalingHookSummary struct {
	ID        types.String `tfsdk:"id"`
	Hostname  types.String `tfsdk:"hostname"`
	URL       types.String `tfsdk:"url"`
	Min       types.Int64  `tfsdk:"min"`
	Max       types.Int64  `tfsdk:"max"`
	Armed     types.Bool   `tfsdk:"armed"`
	Breaker   types.String `tfsdk:"breaker"`
	Failures  types.Int64  `tfsdk:"failures"`
	SecretSet types.Bool   `tfsdk:"secret_set"`
	Source    types.String `tfsdk:"source"`
	Org       types.String `tfsdk:"org"`
	Active    types.Bool   `tfsdk:"active"`
}

type scalingHooksModel struct {
	Hooks []scalingHookSummary `tfsdk:"hooks"`
}

func (d *scalingHooksDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_scaling_hooks"
}

func (d *scalingHooksDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	s := func(desc string) schema.Attribute {
		return schema.StringAttribute{Computed: true, MarkdownDescription: desc}
	}
	i := func(desc string) schema.Attribute {
		return schema.Int64Attribute{Computed: true, MarkdownDescription: desc}
	}
	b := func(desc string) schema.Attribute {
		return schema.BoolAttribute{Computed: true, MarkdownDescription: desc}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "Lists the scaling hooks the API key may see (its organization's; every one for the operator key), ordered by hostname.",
		Attributes: map[string]schema.Attribute{
			"hooks": schema.ListNestedAttribute{
				Computed:            true,
				MarkdownDescription: "The hooks.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"id":         s("The record's id."),
					"hostname":   s("The hostname it scales."),
					"url":        s("The endpoint the server calls."),
					"min":        i("The fewest instances asked for."),
					"max":        i("The most instances asked for."),
					"armed":      b("Whether the hook may be called."),
					"breaker":    s("`closed`, or `open` after five failed calls in a row."),
					"failures":   i("Failed calls in a row."),
					"secret_set": b("Whether a secret is set (never returned)."),
					"source":     s("`api` (declared with Terraform or the API) or `heartbeat` (announced by a client)."),
					"org":        s("The organization it belongs to."),
					"active":     b("False while the server ignores declarations (scaling off)."),
				}},
			},
		},
	}
}

func (d *scalingHooksDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	data, err := aperioDataFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Provider misconfigured", err.Error())
		return
	}
	d.data = data
}

func (d *scalingHooksDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	recs, err := d.data.client.ListScaling(ctx)
	if err != nil {
		resp.Diagnostics.AddError("Cannot list scaling hooks", err.Error())
		return
	}
	out := scalingHooksModel{Hooks: []scalingHookSummary{}}
	for _, r := range recs {
		out.Hooks = append(out.Hooks, scalingHookSummary{
			ID: types.StringValue(r.ID), Hostname: types.StringValue(r.Hostname), URL: types.StringValue(r.URL),
			Min: types.Int64Value(int64(r.Min)), Max: types.Int64Value(int64(r.Max)), Armed: types.BoolValue(r.Armed),
			Breaker: types.StringValue(r.Breaker), Failures: types.Int64Value(int64(r.Failures)), SecretSet: types.BoolValue(r.SecretSet),
			Source: types.StringValue(r.Source), Org: types.StringValue(r.Org), Active: types.BoolValue(r.Active),
		})
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &out)...)
}
