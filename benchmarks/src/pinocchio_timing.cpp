// Plain Pinocchio in C++, timed per state on one core: the reference row of
// benchmarks/cpu_vs_pinocchio.py.  Built against the `pin` wheel's headers and libraries
// (site-packages/cmeel.prefix) by that script.
//
//   pinocchio_timing URDF FLOATING(0|1) N ROUNDS [FRAME,FRAME,...]
//
// Draws N random states (q = integrate(neutral, v), v, a and tau uniform in [-1, 1]), then for
// each algorithm runs ROUNDS sweeps over the N states and prints one line per algorithm:
// `name ns_per_state_round1 ns_per_state_round2 ...`.  With FRAMES (frame names, comma-separated),
// the kinematics too: every frame's placement (forwardKinematics + updateFramePlacements) and
// every frame's Jacobian (computeJointJacobians + getFrameJacobian per frame, LOCAL_WORLD_ALIGNED).
// ComputeRNEASecondOrderDerivatives twice: into one reused set of tensors, and into a set per state
// ([kept], where the N sets fit KEPT_BYTES), as a batch's results are kept.
#include <pinocchio/algorithm/aba-derivatives.hpp>
#include <pinocchio/algorithm/aba.hpp>
#include <pinocchio/algorithm/crba.hpp>
#include <pinocchio/algorithm/frames.hpp>
#include <pinocchio/algorithm/jacobian.hpp>
#include <pinocchio/algorithm/joint-configuration.hpp>
#include <pinocchio/algorithm/kinematics.hpp>
#include <pinocchio/algorithm/rnea-derivatives.hpp>
#include <pinocchio/algorithm/rnea-second-order-derivatives.hpp>
#include <pinocchio/algorithm/rnea.hpp>
#include <pinocchio/multibody.hpp>
#include <pinocchio/parsers/urdf.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace pin = pinocchio;

// ComputeRNEASecondOrderDerivatives[kept]'s tensor sets, one a state, at most this many bytes in all
constexpr double KEPT_BYTES = 1 << 28;

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        std::fprintf(stderr, "usage: %s URDF FLOATING(0|1) N ROUNDS [FRAME,FRAME,...]\n", argv[0]);
        return 2;
    }
    pin::Model model;
    if (std::atoi(argv[2]))
        pin::urdf::buildModel(argv[1], pin::JointModelFreeFlyer(), model);
    else
        pin::urdf::buildModel(argv[1], model);
    pin::Data data(model);
    const int n = std::atoi(argv[3]), rounds = std::atoi(argv[4]);
    std::srand(12345);
    std::vector<Eigen::VectorXd> q(n), v(n), a(n), tau(n);
    for (int i = 0; i < n; ++i) {
        v[i] = Eigen::VectorXd::Random(model.nv);
        a[i] = Eigen::VectorXd::Random(model.nv);
        tau[i] = Eigen::VectorXd::Random(model.nv);
        q[i] = pin::integrate(model, pin::neutral(model), Eigen::VectorXd::Random(model.nv));
    }
    std::vector<pin::FrameIndex> frames;
    for (std::string names = argc == 6 ? argv[5] : ""; !names.empty();) {
        const auto comma = names.find(',');
        const std::string name = names.substr(0, comma);
        if (!model.existFrame(name)) {
            std::fprintf(stderr, "no frame '%s'\n", name.c_str());
            return 2;
        }
        frames.push_back(model.getFrameId(name));
        names = comma == std::string::npos ? "" : names.substr(comma + 1);
    }
    Eigen::MatrixXd d1 = Eigen::MatrixXd::Zero(model.nv, model.nv), d2 = d1, d3 = d1, Dq = d1, Dv = d1;
    pin::Data::Tensor3x t1(model.nv, model.nv, model.nv), t2 = t1, t3 = t1, t4 = t1;
    pin::Data::Tensor3x zero(model.nv, model.nv, model.nv);
    zero.setZero();
    const bool keep_all = 4.0 * n * model.nv * model.nv * model.nv * sizeof(double) <= KEPT_BYTES;
    std::vector<std::array<pin::Data::Tensor3x, 4>> kept(keep_all ? n : 0, {zero, zero, zero, zero});
    const double dt = 0.01;  // the integrator's step (semi-implicit Euler, as GRiD's default method)
    Eigen::VectorXd qn = Eigen::VectorXd::Zero(model.nq), vn = Eigen::VectorXd::Zero(model.nv), dv = vn;
    Eigen::VectorXd qk = qn, vk = vn, sumv = vn;
    pin::Data::Matrix6x J = pin::Data::Matrix6x::Zero(6, model.nv);
    // RK4's chain rule by hand: block rows over (q, v, tau), nv x 3 nv (integrator_gradient's docstring)
    const int nv = model.nv;
    Eigen::MatrixXd V1 = Eigen::MatrixXd::Zero(nv, 3 * nv), Qk = V1, Tk = V1, Vsum = V1, dq_next = V1, dqd_next = V1;
    V1.middleCols(nv, nv).setIdentity();
    std::vector<Eigen::MatrixXd> As(4, V1), Vs(4, V1);
    Eigen::MatrixXd Mi = d1;
    double sink = 0;  // keeps every result live
    // RK4's stage k + 2 (k = 0, 1, 2) of state i from the one before (vk, and data.ddq its acceleration):
    // the increment dv = c dt vk, qk = integrate(q, dv), Dq = dIntegrate d/dq there, then the stage's
    // velocity vk = v + c dt ddq, added to the step's sum sumv with its weight; returns c
    auto rk4_stage = [&](int i, int k) {
        const double c = k < 2 ? 0.5 : 1.0;
        dv = c * dt * vk;
        pin::integrate(model, q[i], dv, qk);
        pin::dIntegrate(model, q[i], dv, Dq, pin::ARG0);
        vk = v[i] + c * dt * data.ddq;
        sumv += (k < 2 ? 2.0 : 1.0) * vk;
        return c;
    };
    std::vector<std::pair<const char *, std::function<void(int)>>> algorithms = {
        {"rnea", [&](int i) { sink += pin::rnea(model, data, q[i], v[i], a[i])[0]; }},
        {"crba", [&](int i) { sink += pin::crba(model, data, q[i])(0, 0); }},
        {"computeMinverse", [&](int i) { sink += pin::computeMinverse(model, data, q[i])(0, 0); }},
        {"aba", [&](int i) { sink += pin::aba(model, data, q[i], v[i], tau[i])[0]; }},
        {"computeRNEADerivatives", [&](int i) {
             pin::computeRNEADerivatives(model, data, q[i], v[i], a[i], d1, d2, d3);
             sink += d1(0, 0) + d2(0, 0);
         }},
        {"computeABADerivatives", [&](int i) {
             pin::computeABADerivatives(model, data, q[i], v[i], tau[i], d1, d2, d3);
             sink += d1(0, 0) + d2(0, 0);
         }},
        {"ComputeRNEASecondOrderDerivatives", [&](int i) {
             pin::ComputeRNEASecondOrderDerivatives(model, data, q[i], v[i], a[i], t1, t2, t3, t4);
             sink += t1(0, 0, 0) + t4(0, 0, 0);
         }},
        // the same, each state's four tensors kept in a set of their own (allocated zero, as a batch's
        // results are kept, and as GRiD's idsva_so writes each state's): in one reused set above they
        // stay in the caches, 64 sets of atlas's (864 KB each) do not; left out where the sets would
        // take more than KEPT_BYTES
        {"ComputeRNEASecondOrderDerivatives[kept]", [&](int i) {
             auto &t = kept[i];
             pin::ComputeRNEASecondOrderDerivatives(model, data, q[i], v[i], a[i], t[0], t[1], t[2], t[3]);
             sink += t[0](0, 0, 0) + t[3](0, 0, 0);
         }},
        // one semi-implicit Euler step: vn = v + dt aba(q, v, tau), qn = integrate(q, dt vn)
        {"abaIntegrate", [&](int i) {
             vn = v[i] + dt * pin::aba(model, data, q[i], v[i], tau[i]);
             dv = dt * vn;
             pin::integrate(model, q[i], dv, qn);
             sink += qn[0] + vn[0];
         }},
        // its Jacobians' ingredients: the ABA derivatives (and Minv), and dIntegrate at the step's
        // increment, d/dq and d/dv (the products that compose the step's blocks are not timed)
        {"abaDerivativesDIntegrate", [&](int i) {
             pin::computeABADerivatives(model, data, q[i], v[i], tau[i], d1, d2, d3);
             dv = dt * (v[i] + dt * data.ddq);
             pin::dIntegrate(model, q[i], dv, Dq, pin::ARG0);
             pin::dIntegrate(model, q[i], dv, Dv, pin::ARG1);
             sink += d1(0, 0) + d2(0, 0) + Dq(0, 0) + Dv(0, 0);
         }},
        // RK4's Jacobians' ingredients: the ABA derivatives at each of its four stages (stage k + 1 at
        // q_k = integrate(q, c dt v_k), v_k = v + c dt a_k, c = 1/2, 1/2, 1) and dIntegrate d/dq and d/dv
        // at each stage's increment and at the step's, dt/6 (v1 + 2 v2 + 2 v3 + v4) (the chain rule's
        // products through the stages are not timed)
        {"abaDerivativesDIntegrateRK4", [&](int i) {
             pin::computeABADerivatives(model, data, q[i], v[i], tau[i], d1, d2, d3);
             vk = v[i];
             sumv = v[i];
             for (int k = 0; k < 3; ++k) {
                 rk4_stage(i, k);
                 pin::dIntegrate(model, q[i], dv, Dv, pin::ARG1);
                 pin::computeABADerivatives(model, data, qk, vk, tau[i], d1, d2, d3);
                 sink += d1(0, 0) + Dq(0, 0) + Dv(0, 0);
             }
             dv = dt / 6 * sumv;
             pin::dIntegrate(model, q[i], dv, Dq, pin::ARG0);
             pin::dIntegrate(model, q[i], dv, Dv, pin::ARG1);
             sink += d1(0, 0) + d2(0, 0) + Dq(0, 0) + Dv(0, 0);
         }},
        // RK4's step Jacobians by hand on Pinocchio: the ingredients of the row above composed by the
        // chain rule through the stages, as GRiD's integrator_gradient does (Eigen's products;
        // dIntegrateTransport applies dIntegrate d/dv to a block row without forming the product)
        {"rk4GradientByHand", [&](int i) {
             pin::computeABADerivatives(model, data, q[i], v[i], tau[i], d1, d2, d3);
             Mi = d3;
             Mi.triangularView<Eigen::StrictlyLower>() = d3.transpose();  // Minv: Pinocchio fills the upper half
             As[0] << d1, d2, Mi;  // A_1 = [dqdd/dq, dqdd/dv, Minv]
             vk = v[i];
             sumv = v[i];
             for (int k = 0; k < 3; ++k) {
                 const double c = rk4_stage(i, k);
                 pin::dIntegrateTransport(model, q[i], dv, Vs[k], Tk, pin::ARG1);
                 Qk = c * dt * Tk;  // Q_{k+1} = [Dq 0 0] + c dt Dv V_k
                 Qk.leftCols(nv) += Dq;
                 Vs[k + 1] = V1 + c * dt * As[k];
                 pin::computeABADerivatives(model, data, qk, vk, tau[i], d1, d2, d3);
                 Mi = d3;
                 Mi.triangularView<Eigen::StrictlyLower>() = d3.transpose();
                 As[k + 1].noalias() = d1 * Qk;  // A_{k+1} = dqdd/dq Q + dqdd/dv V + [0 0 Minv]
                 As[k + 1].noalias() += d2 * Vs[k + 1];
                 As[k + 1].rightCols(nv) += Mi;
             }
             dv = dt / 6 * sumv;
             Vsum = Vs[0] + 2 * Vs[1] + 2 * Vs[2] + Vs[3];
             pin::dIntegrate(model, q[i], dv, Dq, pin::ARG0);
             pin::dIntegrateTransport(model, q[i], dv, Vsum, Tk, pin::ARG1);
             dq_next = dt / 6 * Tk;
             dq_next.leftCols(nv) += Dq;
             dqd_next = V1 + dt / 6 * (As[0] + 2 * As[1] + 2 * As[2] + As[3]);
             sink += dq_next(0, 0) + dqd_next(0, 0);
         }},
    };
    if (!frames.empty()) {
        algorithms.push_back({"framePlacements", [&](int i) {
                                  pin::forwardKinematics(model, data, q[i]);
                                  pin::updateFramePlacements(model, data);
                                  for (const auto f : frames) sink += data.oMf[f].translation()[0];
                              }});
        algorithms.push_back({"frameJacobians", [&](int i) {
                                  pin::computeJointJacobians(model, data, q[i]);
                                  for (const auto f : frames) {
                                      pin::getFrameJacobian(model, data, f, pin::LOCAL_WORLD_ALIGNED, J);
                                      sink += J(0, 0);
                                  }
                              }});
    }
    if (!keep_all)
        algorithms.erase(std::remove_if(algorithms.begin(), algorithms.end(),
                                        [](const auto &e) { return std::string(e.first).find("[kept]") != std::string::npos; }),
                         algorithms.end());
    std::printf("nq %d nv %d\n", model.nq, model.nv);
    for (const auto &[name, run] : algorithms) {
        for (int i = 0; i < n; ++i) run(i);  // warm-up sweep
        std::printf("%s", name);
        for (int r = 0; r < rounds; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < n; ++i) run(i);
            const std::chrono::duration<double, std::nano> dt = std::chrono::steady_clock::now() - t0;
            std::printf(" %.1f", dt.count() / n);
        }
        std::printf("\n");
        std::fflush(stdout);
    }
    std::fprintf(stderr, "%g\n", sink);
    return 0;
}
