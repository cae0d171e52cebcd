package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/qodaperio/autoscale/internal/pool"
)

// poolNameValidator runs the server's own name rule on tenant, tenant_db and
// pool, so a bad name fails at validate time with the server's words.
type poolNameValidator struct{}

func (poolNameValidator) Description(context.Context) string { return "a name: " + pool.NameRule }

func (v poolNameValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (poolNameValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := pool.ValidateName(req.Path.String(), req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid name", err.Error())
	}
}
