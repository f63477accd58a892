// The engine tests' model: the tiny V4.1 checkpoint of the test data (FATHOM_TEST_DATA), loaded
// once per test process in fast numerics, and the engine's runner over it. Shared by the
// engine test files so that one engine_tests process loads it once. Any thread (the first
// call loads; C++ static initialisation).
#pragma once

#include <memory>

#include "engine/model_runner.h"
#include "model/v41.h"

namespace fathom::engine::test {

// A fresh load of the tiny checkpoint in `numerics` (a failure is a test failure).
std::unique_ptr<model::V41Model> load_tiny_model(model::Numerics numerics);
// The shared fast-numerics model, and the runner over it.
const model::V41Model& tiny_model();
const ModelRunner& tiny_runner();

}  // namespace fathom::engine::test
