// Time and value axes: pixel round trips under zoom and pan, the zoom anchor, shared scales
// across runs, live follow, and the nice-number helpers.
#include <gtest/gtest.h>

#include <random>

#include "viewer/model/time_axis.hpp"
#include "viewer/model/time_view.hpp"

namespace shardlab::viewer {

TEST(ViewerTimeAxis, RoundTripsUnderZoomAndPan) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> px(0, 1200), zoom(0.5, 2.0), pan(-300, 300);
  TimeAxis a(100, 1200, 5e6, 2e4);
  for (int i = 0; i < 200; ++i) {
    if (i % 2)
      a.zoom_at(px(rng), zoom(rng));
    else
      a.pan_px(pan(rng));
    for (int j = 0; j < 5; ++j) {
      double x = px(rng);
      EXPECT_NEAR(a.to_x(a.to_t(x)), x, 1e-6);
      double t = a.t_begin() + (a.t_end() - a.t_begin()) * (j / 4.0);
      EXPECT_NEAR(a.to_t(a.to_x(t)), t, 1e-6 * std::max(1.0, std::abs(t)));
    }
  }
}

TEST(ViewerTimeAxis, ZoomKeepsTheTimeUnderTheCursor) {
  TimeAxis a(50, 1000, 0, 1e6);  // 1 ms per pixel: [0, 1 s)
  double x = 300;
  double t = a.to_t(x);  // 250 ms
  EXPECT_DOUBLE_EQ(t, 250e6);
  a.zoom_at(x, 4.0);
  EXPECT_DOUBLE_EQ(a.ns_per_px(), 0.25e6);
  EXPECT_NEAR(a.to_t(x), t, 1e-6);
  EXPECT_NEAR(a.t_begin(), 250e6 - 250 * 0.25e6, 1e-6);
  // Pan: dragging 100 px right brings 100 px of earlier time in.
  double before = a.t_begin();
  a.pan_px(100);
  EXPECT_DOUBLE_EQ(a.t_begin(), before - 100 * 0.25e6);
  // Zoom is clamped.
  a.zoom_at(x, 1e30);
  EXPECT_DOUBLE_EQ(a.ns_per_px(), TimeAxis::kMinNsPerPx);
}

TEST(ViewerTimeAxis, FitAndPinRight) {
  TimeAxis a(10, 500, 0, 1);
  a.fit(2e6, 7e6);
  EXPECT_DOUBLE_EQ(a.to_x(2e6), 10);
  EXPECT_DOUBLE_EQ(a.to_x(7e6), 510);
  a.pin_right(20e6);
  EXPECT_DOUBLE_EQ(a.t_end(), 20e6);
  EXPECT_DOUBLE_EQ(a.ns_per_px(), 1e4);
  a.set_pixels(0, 1000);  // a wider panel shows more time at the same scale
  EXPECT_DOUBLE_EQ(a.t_begin(), 15e6);
  EXPECT_DOUBLE_EQ(a.t_end(), 25e6);
}

TEST(ViewerTimeView, RunsShareOneScale) {
  TimeView v(2);
  v.set_pixels(0, 0, 800);
  v.set_pixels(1, 800, 800);
  // Run 0's step lasts 10 ms, run 1's 40 ms: both shown from their own start at run 1's scale.
  v.show({100e6, 300e6}, {110e6, 340e6});
  EXPECT_DOUBLE_EQ(v.axis(0).ns_per_px(), v.axis(1).ns_per_px());
  EXPECT_DOUBLE_EQ(v.axis(0).ns_per_px(), 40e6 / 800);
  EXPECT_DOUBLE_EQ(v.axis(0).to_x(100e6), 0);
  EXPECT_DOUBLE_EQ(v.axis(1).to_x(300e6), 800);
  EXPECT_DOUBLE_EQ(v.axis(1).to_x(340e6), 1600);
  v.zoom(200, 2.0);
  v.pan(-50);
  EXPECT_DOUBLE_EQ(v.axis(0).ns_per_px(), v.axis(1).ns_per_px());
  // The same relative pixel still shows each run's own time, shifted by the same amount.
  EXPECT_NEAR(v.axis(0).to_t(0) - 100e6, v.axis(1).to_t(800) - 300e6, 1e-3);
}

TEST(ViewerTimeView, FollowShowsEverythingThenScrolls) {
  TimeView v(1);
  v.set_pixels(0, 0, 1000);
  v.show({0}, {1e9});  // 1 ms per px
  v.follow({400000000});
  EXPECT_DOUBLE_EQ(v.axis(0).t_begin(), 0);
  v.follow({3000000000});
  EXPECT_DOUBLE_EQ(v.axis(0).t_end(), 3e9);
  EXPECT_DOUBLE_EQ(v.axis(0).ns_per_px(), 1e6);
}

TEST(ViewerTimeAxis, NiceNumbers) {
  EXPECT_DOUBLE_EQ(nice_step(0.7), 1);
  EXPECT_DOUBLE_EQ(nice_step(1.0), 1);
  EXPECT_DOUBLE_EQ(nice_step(1.2), 2);
  EXPECT_DOUBLE_EQ(nice_step(3), 5);
  EXPECT_DOUBLE_EQ(nice_step(7), 10);
  EXPECT_DOUBLE_EQ(nice_step(4200), 5000);
  auto ticks = nice_ticks(3, 41, 10, 45);  // step 5 at 10 px per unit
  ASSERT_EQ(ticks.size(), 8u);
  EXPECT_DOUBLE_EQ(ticks.front(), 5);
  EXPECT_DOUBLE_EQ(ticks.back(), 40);
  EXPECT_EQ(nice_bytes_ceiling(3 << 20), 3 << 20);
  EXPECT_EQ(nice_bytes_ceiling((3 << 20) + 1), 4 << 20);
  EXPECT_EQ(nice_bytes_ceiling(1 << 20), 1 << 20);
  EXPECT_EQ(nice_bytes_ceiling(1500), 1536);  // 1.5 KiB
  EXPECT_EQ(nice_bytes_ceiling(int64_t(269) << 20), int64_t(300) << 20);
  EXPECT_EQ(nice_bytes_ceiling(int64_t(110) << 30), int64_t(125) << 30);
  EXPECT_GE(nice_bytes_ceiling(123456789), 123456789);
  EXPECT_EQ(format_duration(1.5e6), "1.5 ms");
  EXPECT_EQ(format_duration(250e3), "250 us");
  EXPECT_EQ(format_rate(12.5e9), "12.50 GB/s");
  EXPECT_EQ(format_bytes_short(238 << 20), "238 MiB");
  EXPECT_EQ(format_bytes_short(int64_t(12.5 * (1 << 20))), "12.5 MiB");
  EXPECT_EQ(format_bytes_short(int64_t(1000) << 20), "0.98 GiB");
  EXPECT_EQ(format_bytes_short(512), "512 B");
}

TEST(ViewerValueAxis, MapsBytesToPixels) {
  ValueAxis v{1000, 500, 200};
  EXPECT_DOUBLE_EQ(v.to_y(0), 500);
  EXPECT_DOUBLE_EQ(v.to_y(1000), 300);
  EXPECT_DOUBLE_EQ(v.to_y(250), 450);
  EXPECT_DOUBLE_EQ(v.to_v(v.to_y(730)), 730);
}

}  // namespace shardlab::viewer
