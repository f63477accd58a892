#include "engine/test_util.h"

#include <gtest/gtest.h>

#include <string>

#include "runner/v41_runner.h"

namespace fathom::engine::test {

std::unique_ptr<model::V41Model> load_tiny_model(model::Numerics numerics) {
  model::ModelOptions o;
  o.numerics = numerics;
  auto r = model::V41Model::load(std::string(FATHOM_TEST_DATA) + "/model/v41-tiny", o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return std::move(*r);
}

const model::V41Model& tiny_model() {
  static const std::unique_ptr<model::V41Model> m = load_tiny_model(model::Numerics::kFast);
  return *m;
}

const ModelRunner& tiny_runner() {
  static const runner::V41Runner r(tiny_model());
  return r;
}

}  // namespace fathom::engine::test
